"""Rotary position embeddings (Su et al. 2021) for queries and keys.

With positions='rotary' a Transformer adds no position embedding to its
inputs; each attention layer instead rotates its queries and keys by
angles proportional to their absolute positions, so that a query-key
score depends on the two positions only through their distance.

The layout is Hugging Face Llama's ("rotate_half"): a head's vector
[x1, x2] of two halves is rotated pairwise, x1[i] with x2[i], by angle
position * inv_freq[i]:

  rotate(x) = x * cos + concat(-x2, x1) * sin,  cos = concat(c, c), ...

so the query and key weights of a Hugging Face checkpoint are used as they
are stored, without a permutation. `RopeScaling` stretches the
frequencies for contexts longer than a model was trained on, as
transformers' 'linear' and 'llama3' rope types do.
"""

import dataclasses
import math

import jax
import jax.numpy as jnp
import numpy as np

from bpd_jax.infra import numeric

ROPE_KINDS = ('linear', 'llama3')


@dataclasses.dataclass(frozen=True)
class RopeScaling:
  """A stretch of the rotary frequencies (TransformerConfig.rope_scaling).

  Attributes:
    kind: 'linear' (every frequency divided by `factor`: positions
      interpolated) or 'llama3' (Llama 3.1: wavelengths longer than
      original_max_positions / low_freq_factor divided by `factor`, shorter
      than original_max_positions / high_freq_factor kept, those between
      interpolated smoothly).
    factor: how many times longer the context is meant to be, > 0.
    low_freq_factor: 'llama3' only, > 0.
    high_freq_factor: 'llama3' only, > low_freq_factor.
    original_max_positions: 'llama3' only: the context the model was
      first trained on (transformers' original_max_position_embeddings).
  """
  kind: str
  factor: float
  low_freq_factor: float = 1.0
  high_freq_factor: float = 4.0
  original_max_positions: int = 8192

  def __post_init__(self):
    def check(ok, message):
      if not ok:
        raise ValueError(f'rope_scaling: {message}')
    check(self.kind in ROPE_KINDS,
          f'kind={self.kind!r} is not one of {ROPE_KINDS}.')
    for name in ('factor', 'low_freq_factor', 'high_freq_factor'):
      value = getattr(self, name)
      check(numeric.is_finite(value) and value > 0,
            f'{name}={value!r} must be a finite number > 0.')
    check(self.high_freq_factor > self.low_freq_factor,
          f'high_freq_factor={self.high_freq_factor!r} must be greater '
          f'than low_freq_factor={self.low_freq_factor!r}.')
    check(numeric.is_integer(self.original_max_positions)
          and self.original_max_positions >= 1,
          f'original_max_positions={self.original_max_positions!r} must '
          f'be an integer >= 1.')

  @classmethod
  def from_fields(cls, fields) -> 'RopeScaling | None':
    """A scaling from a config's `model.rope_scaling`: None, a RopeScaling,
    or a mapping of its fields (a dict or ConfigDict)."""
    if fields is None or isinstance(fields, cls):
      return fields
    if not hasattr(fields, 'items'):
      raise ValueError(f'rope_scaling={fields!r} must be None or a dict of '
                       f'RopeScaling fields (kind, factor, ...).')
    fields = dict(fields.items())
    known = {field.name for field in dataclasses.fields(cls)}
    unknown = sorted(set(fields) - known)
    if unknown:
      raise ValueError(f'rope_scaling: unknown field {unknown[0]!r}; known: '
                       f'{sorted(known)}.')
    if 'kind' not in fields or 'factor' not in fields:
      raise ValueError(f'rope_scaling={fields!r} needs kind and factor.')
    return cls(**fields)


def inverse_frequencies(head_dim: int, theta: float,
                        scaling: RopeScaling | None = None) -> np.ndarray:
  """[head_dim // 2] float32 angle per position of each rotated pair.

  Computed in float32 as transformers computes them, so that imported
  models see the same angles.
  """
  exponents = np.arange(0, head_dim, 2).astype(np.float32) / np.float32(
      head_dim)
  inv_freq = np.float32(1.0) / np.power(np.float32(theta), exponents)
  if scaling is None:
    return inv_freq
  factor = np.float32(scaling.factor)
  if scaling.kind == 'linear':
    return inv_freq / factor
  # 'llama3': divide the low frequencies, keep the high ones, interpolate.
  context = np.float32(scaling.original_max_positions)
  low, high = (np.float32(scaling.low_freq_factor),
               np.float32(scaling.high_freq_factor))
  wavelength = np.float32(2 * math.pi) / inv_freq
  scaled = np.where(wavelength > context / low, inv_freq / factor, inv_freq)
  smooth = (context / wavelength - low) / (high - low)
  between = (wavelength >= context / high) & (wavelength <= context / low)
  smoothed = (1 - smooth) * scaled / factor + smooth * scaled
  return np.where(between, smoothed, scaled).astype(np.float32)


@dataclasses.dataclass(frozen=True)
class Rotary:
  """The rotation of one attention layer's queries and keys (static).

  Attributes:
    head_dim: width of a head's vector, even.
    theta: the frequencies' base (transformers' rope_theta).
    scaling: a stretch of the frequencies, or None.
  """
  head_dim: int
  theta: float = 10_000.0
  scaling: RopeScaling | None = None

  def __call__(self, x: jax.Array, positions: jax.Array) -> jax.Array:
    """x rotated by its positions' angles.

    Args:
      x: [batch, n, heads, head_dim] queries or keys.
      positions: [batch, n] the absolute position of each.

    Returns:
      [batch, n, heads, head_dim], x's dtype. The angles and their sines
      and cosines are computed in at least float32 and cast to x's dtype,
      as transformers does, then the rotation runs in x's dtype.
    """
    angle_dtype = jnp.promote_types(x.dtype, jnp.float32)
    inv_freq = jnp.asarray(
        inverse_frequencies(self.head_dim, self.theta, self.scaling),
        angle_dtype)
    angles = positions.astype(angle_dtype)[..., None] * inv_freq
    angles = jnp.concatenate([angles, angles], axis=-1)[:, :, None, :]
    cos, sin = jnp.cos(angles).astype(x.dtype), jnp.sin(angles).astype(
        x.dtype)
    half = self.head_dim // 2
    rotated = jnp.concatenate([-x[..., half:], x[..., :half]], axis=-1)
    return x * cos + rotated * sin
