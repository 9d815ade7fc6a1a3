"""Rotary positions: the rotation against a direct formula, both
frequency scalings, and the scaling's checks."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from bpd_jax.models import rotary
from bpd_jax.models.rotary import RopeScaling


def rotated_by_formula(x, positions, inv_freq):
  """Each pair (x[i], x[i + half]) turned by position * inv_freq[i]."""
  half = x.shape[-1] // 2
  out = np.empty_like(x)
  for b, n, h in np.ndindex(*x.shape[:3]):
    for i in range(half):
      angle = positions[b, n] * inv_freq[i]
      c, s = math.cos(angle), math.sin(angle)
      a, z = x[b, n, h, i], x[b, n, h, i + half]
      out[b, n, h, i] = a * c - z * s
      out[b, n, h, i + half] = z * c + a * s
  return out


def llama3_by_formula(inv_freq, factor, low, high, context):
  """Llama 3.1's rule, one frequency at a time."""
  out = []
  for f in inv_freq.astype(np.float64):
    wavelength = 2 * math.pi / f
    if wavelength < context / high:
      out.append(f)
    elif wavelength > context / low:
      out.append(f / factor)
    else:
      smooth = (context / wavelength - low) / (high - low)
      out.append((1 - smooth) * f / factor + smooth * f)
  return np.asarray(out)


@pytest.mark.parametrize('scaling', [
    None, RopeScaling('linear', 4.0),
    RopeScaling('llama3', 8.0, low_freq_factor=1.0, high_freq_factor=4.0,
                original_max_positions=64)])
def test_rotation_is_the_pairwise_formula(scaling):
  head_dim, theta = 16, 500.0
  x = np.asarray(jax.random.normal(jax.random.key(0), (2, 3, 2, head_dim)),
                 np.float64)
  positions = np.asarray([[0, 5, 9], [130, 7, 2]])
  inv_freq = 1.0 / theta ** (np.arange(0, head_dim, 2) / head_dim)
  if scaling is not None and scaling.kind == 'linear':
    inv_freq = inv_freq / 4.0
  elif scaling is not None:
    inv_freq = llama3_by_formula(inv_freq, 8.0, 1.0, 4.0, 64)
  np.testing.assert_allclose(
      rotary.inverse_frequencies(head_dim, theta, scaling), inv_freq,
      rtol=1e-6)
  with jax.enable_x64(True):
    out = rotary.Rotary(head_dim, theta, scaling)(jnp.asarray(x),
                                                  jnp.asarray(positions))
  np.testing.assert_allclose(out, rotated_by_formula(x, positions, inv_freq),
                             rtol=1e-5, atol=1e-5)


def test_llama3_keeps_high_divides_low_and_blends_between():
  inv_freq = rotary.inverse_frequencies(64, 10_000.0)
  scaled = rotary.inverse_frequencies(
      64, 10_000.0, RopeScaling('llama3', 8.0, original_max_positions=256))
  wavelength = 2 * math.pi / inv_freq
  short, long = wavelength < 256 / 4, wavelength > 256 / 1
  between = ~short & ~long
  assert short.any() and long.any() and between.any()
  np.testing.assert_array_equal(scaled[short], inv_freq[short])
  np.testing.assert_allclose(scaled[long], inv_freq[long] / 8, rtol=1e-6)
  assert ((scaled[between] < inv_freq[between])
          & (scaled[between] > inv_freq[between] / 8)).all()


def test_scores_depend_on_the_distance_only():
  rotate = rotary.Rotary(8, 100.0)
  q, k = jax.random.normal(jax.random.key(1), (2, 1, 1, 1, 8))
  score = lambda i, j: float(jnp.sum(rotate(q, jnp.asarray([[i]]))
                                     * rotate(k, jnp.asarray([[j]]))))
  assert score(3, 1) == pytest.approx(score(12, 10), rel=1e-4)
  assert score(3, 1) != pytest.approx(score(3, 2), rel=1e-4)


def test_bfloat16_rotates_in_its_dtype_with_float32_angles():
  x = jax.random.normal(jax.random.key(2), (1, 2, 1, 8)).astype(jnp.bfloat16)
  positions = jnp.asarray([[300, 301]])  # Not exact in bfloat16.
  out = rotary.Rotary(8)(x, positions)
  assert out.dtype == jnp.bfloat16
  with jax.enable_x64(True):
    exact = rotated_by_formula(np.asarray(x, np.float64), np.asarray(
        positions), rotary.inverse_frequencies(8, 10_000.0))
  np.testing.assert_allclose(np.asarray(out, np.float32), exact, atol=3e-2)


@pytest.mark.parametrize('fields,message', [
    (dict(kind='yarn', factor=2.0), "kind='yarn' is not one of"),
    (dict(kind='linear', factor=0.0), 'factor=0.0 must be a finite number'),
    (dict(kind='llama3', factor=8.0, low_freq_factor=4.0,
          high_freq_factor=1.0), 'high_freq_factor=1.0 must be greater'),
    (dict(kind='llama3', factor=8.0, original_max_positions=1.5),
     'original_max_positions=1.5 must be an integer'),
])
def test_bad_scalings(fields, message):
  with pytest.raises(ValueError, match=message):
    RopeScaling(**fields)


def test_scaling_from_a_config_field():
  assert RopeScaling.from_fields(None) is None
  assert RopeScaling.from_fields(dict(kind='linear', factor=2.0)) == (
      RopeScaling('linear', 2.0))
  with pytest.raises(ValueError, match="unknown field 'rope_type'"):
    RopeScaling.from_fields(dict(rope_type='linear', factor=2.0))
  with pytest.raises(ValueError, match='needs kind and factor'):
    RopeScaling.from_fields(dict(kind='linear'))
  with pytest.raises(ValueError, match='must be None or a dict'):
    RopeScaling.from_fields('linear')

