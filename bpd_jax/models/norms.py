"""The Transformer's normalisation layers (TransformerConfig.norm).

- 'layer': LayerNorm (Ba et al. 2016), with a scale and a bias: the
  paper's Transformer and GPT-2.
- 'rms': RMSNorm (Zhang and Sennrich 2019), a scale and no bias, no mean
  subtracted: Llama, Mistral, Qwen2.

Both compute their statistics in at least float32 whatever the compute
dtype (flax's LayerNorm does so itself).
"""

import jax
import jax.numpy as jnp
from flax import nnx

NORMS = ('layer', 'rms')


class RMSNorm(nnx.Module):
  """x / sqrt(mean(x^2) + epsilon) * scale over the last axis.

  As Llama computes it: normalised in at least float32, cast to the
  compute dtype, then multiplied by the scale in that dtype.
  """

  def __init__(self, width: int, *, epsilon: float, dtype=None,
               param_dtype=jnp.float32):
    """Creates the layer.

    Args:
      width: the normalised axis' size.
      epsilon: added to the mean square.
      dtype: computation dtype (None: the input's).
      param_dtype: the scale's dtype.
    """
    self.scale = nnx.Param(jnp.ones((width,), param_dtype))
    self.epsilon = epsilon
    self.dtype = dtype

  def __call__(self, x: jax.Array) -> jax.Array:
    """[..., width] -> [..., width] in the compute dtype."""
    dtype = self.dtype or x.dtype
    wide = x.astype(jnp.promote_types(x.dtype, jnp.float32))
    mean_square = jnp.mean(jnp.square(wide), axis=-1, keepdims=True)
    normalised = (wide * jax.lax.rsqrt(mean_square + self.epsilon)).astype(
        dtype)
    return normalised * self.scale[...].astype(dtype)


def make(kind: str, width: int, *, epsilon: float, dtype, param_dtype,
         rngs: nnx.Rngs) -> nnx.LayerNorm | RMSNorm:
  """A norm of one of NORMS over `width` features (the kind checked by
  TransformerConfig).

  Args:
    kind: 'layer' or 'rms'.
    width: the normalised axis' size.
    epsilon: added to the variance (or mean square).
    dtype: computation dtype.
    param_dtype: parameter dtype.
    rngs: initialisation randomness (LayerNorm's).
  """
  if kind == 'layer':
    return nnx.LayerNorm(width, epsilon=epsilon, dtype=dtype,
                         param_dtype=param_dtype, rngs=rngs)
  return RMSNorm(width, epsilon=epsilon, dtype=dtype,
                 param_dtype=param_dtype)
