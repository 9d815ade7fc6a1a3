"""Array helpers shared by models and decoders.

Blockwise decoding keeps one offset per example (its own accepted length), so
reads and writes at "each example's own position" recur in the attention
cache and in the decoders' output buffers. Both go through these helpers.
"""

import jax
import jax.numpy as jnp


def write_at(buffer: jax.Array, update: jax.Array, start: jax.Array) -> jax.Array:
  """Writes `update[i]` into `buffer[i]` starting at position `start[i]`.

  Args:
    buffer: [batch, length, ...].
    update: [batch, n, ...] with n <= length and trailing dims as `buffer`.
    start: [batch] int offsets along axis 1.

  Returns:
    [batch, length, ...], the updated buffer. As with
    `lax.dynamic_update_slice`, a start past `length - n` is clamped, so
    callers size buffers to fit the largest write.
  """
  def write_one(row, upd, s):
    return jax.lax.dynamic_update_slice_in_dim(row, upd, s, axis=0)

  return jax.vmap(write_one)(buffer, update.astype(buffer.dtype), start)


def slice_at(array: jax.Array, start: jax.Array, size: int) -> jax.Array:
  """Returns `array[i, start[i]:start[i] + size]` for every example i.

  Args:
    array: [batch, length, ...].
    start: [batch] int offsets along axis 1, clamped (as by
      `lax.dynamic_slice`) to [0, length - size].
    size: positions to read, <= length.

  Returns:
    [batch, size, ...].
  """
  def slice_one(row, s):
    return jax.lax.dynamic_slice_in_dim(row, s, size, axis=0)

  return jax.vmap(slice_one)(array, start)


def take_at(array: jax.Array, index: jax.Array) -> jax.Array:
  """Returns `array[i, index[i]]` for every example i.

  Args:
    array: [batch, length, ...].
    index: [batch] int positions along axis 1.

  Returns:
    [batch, ...].
  """
  index = index.reshape((-1,) + (1,) * (array.ndim - 1))
  return jnp.take_along_axis(array, index, axis=1)[:, 0]


def argmax(values: jax.Array) -> jax.Array:
  """Index of the largest entry along the last axis (the first one on ties).

  Equal to `jnp.argmax` on finite values (a row holding NaN gives its last
  index). Written as two plain reductions, max then the first index holding
  it, because XLA-CPU lowers `jnp.argmax`'s (value, index) reduction 2-3x
  slower, and a decoder takes several argmaxes over the vocabulary per call.

  Args:
    values: [..., n].

  Returns:
    [...] int32.
  """
  n = values.shape[-1]
  best = jnp.max(values, axis=-1, keepdims=True)
  index = jnp.min(jnp.where(values == best, jnp.arange(n, dtype=jnp.int32), n),
                  axis=-1)
  return jnp.minimum(index, n - 1)
