"""Norms: RMSNorm as Llama computes it; the config's kind of norm."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from bpd_jax.models import norms


def test_rms_norm_is_the_formula():
  x = np.asarray(jax.random.normal(jax.random.key(0), (2, 3, 8))) * 3 + 1
  layer = norms.RMSNorm(8, epsilon=1e-5, param_dtype=jnp.float32)
  layer.scale[...] = jnp.arange(1.0, 9.0)
  expected = (x / np.sqrt(np.mean(x ** 2, axis=-1, keepdims=True) + 1e-5)
              * np.arange(1.0, 9.0))
  np.testing.assert_allclose(layer(jnp.asarray(x)), expected, rtol=1e-5)
  assert set(nnx.state(layer, nnx.Param)) == {'scale'}  # No bias.


def test_rms_norm_in_bfloat16_normalises_in_float32():
  """Llama's order: normalised in float32, cast to the compute dtype, then
  scaled in that dtype."""
  x = (jax.random.normal(jax.random.key(1), (4, 16)) * 50).astype(
      jnp.bfloat16)
  layer = norms.RMSNorm(16, epsilon=1e-6, dtype=jnp.bfloat16,
                        param_dtype=jnp.bfloat16)
  layer.scale[...] = jnp.linspace(0.5, 2.0, 16).astype(jnp.bfloat16)
  wide = x.astype(jnp.float32)
  normalised = wide / jnp.sqrt(jnp.mean(wide ** 2, -1, keepdims=True) + 1e-6)
  expected = normalised.astype(jnp.bfloat16) * layer.scale[...]
  out = layer(x)
  assert out.dtype == jnp.bfloat16
  np.testing.assert_array_equal(out, expected)


@pytest.mark.parametrize('kind,kind_type', [('layer', nnx.LayerNorm),
                                            ('rms', norms.RMSNorm)])
def test_make_gives_the_kind_with_its_epsilon(kind, kind_type):
  layer = norms.make(kind, 4, epsilon=1e-3, dtype=None,
                     param_dtype=jnp.float32, rngs=nnx.Rngs(0))
  assert isinstance(layer, kind_type) and layer.epsilon == 1e-3

