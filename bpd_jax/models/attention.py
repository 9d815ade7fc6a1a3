"""Multi-head attention with an explicit key/value cache.

Flax's built-in attention cache keeps one write index for the whole batch and
takes one token per call. Blockwise decoding needs more: one call scores the
k proposed positions of every example at once, and every example writes them
at its own offset (its own accepted length). So the cache here is an explicit
pytree, written with per-example offsets, and attention masks each query by
its own absolute position: a key written for a proposal that was later
rejected sits beyond the example's accepted length, is never attended to, and
is overwritten by the next call.
"""

import dataclasses

import jax
import jax.numpy as jnp
from flax import nnx

from bpd_jax import ops


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class KVCache:
  """Keys and values of one attention layer.

  Attributes:
    key: [batch, positions, heads, head_dim].
    value: [batch, positions, heads, head_dim].
  """
  key: jax.Array
  value: jax.Array

  @classmethod
  def zeros(cls, batch, positions, num_heads, head_dim, dtype):
    shape = (batch, positions, num_heads, head_dim)
    return cls(jnp.zeros(shape, dtype), jnp.zeros(shape, dtype))


def causal_mask(query_positions: jax.Array, num_keys: int) -> jax.Array:
  """[batch, 1, n, num_keys] bool: query at absolute position p sees keys <= p.

  Args:
    query_positions: [batch, n] absolute positions of the queries.
    num_keys: number of key positions (the cache length).
  """
  key_positions = jnp.arange(num_keys)
  return (key_positions[None, None, :] <= query_positions[:, :, None])[:, None]


def padding_mask(key_valid: jax.Array) -> jax.Array:
  """[batch, 1, 1, keys] bool from [batch, keys] validity (True = attend)."""
  return key_valid[:, None, None, :]


class _Projections(nnx.Module):
  """Shared shape logic: [..., d_model] <-> [..., heads, head_dim]."""

  def __init__(self, d_model: int, num_heads: int):
    if d_model % num_heads:
      raise ValueError(
          f'd_model={d_model} must be divisible by num_heads={num_heads}.')
    self.num_heads = num_heads
    self.head_dim = d_model // num_heads

  def _split_heads(self, x: jax.Array, parts: int) -> list[jax.Array]:
    """[b, n, parts * d_model] -> parts x [b, n, heads, head_dim]."""
    x = x.reshape(x.shape[:-1] + (parts, self.num_heads, self.head_dim))
    return [x[..., i, :, :] for i in range(parts)]

  def _merge_heads(self, x: jax.Array) -> jax.Array:
    return x.reshape(x.shape[:-2] + (self.num_heads * self.head_dim,))


class SelfAttention(_Projections):
  """Causal or bidirectional self-attention; fused query/key/value projection."""

  def __init__(self, d_model: int, num_heads: int, *, dtype, param_dtype,
               rngs: nnx.Rngs):
    super().__init__(d_model, num_heads)
    linear = dict(dtype=dtype, param_dtype=param_dtype, rngs=rngs)
    self.qkv = nnx.Linear(d_model, 3 * d_model, **linear)
    self.out = nnx.Linear(d_model, d_model, **linear)

  def __call__(self, x: jax.Array, mask: jax.Array) -> jax.Array:
    """Uncached attention over the whole sequence (training, encoder).

    Args:
      x: [batch, length, d_model].
      mask: bool, broadcastable to [batch, heads, length, length].

    Returns:
      [batch, length, d_model].
    """
    q, k, v = self._split_heads(self.qkv(x), 3)
    y = jax.nn.dot_product_attention(q, k, v, mask=mask)
    return self.out(self._merge_heads(y))

  def extend(self, x: jax.Array, cache: KVCache,
             start: jax.Array) -> tuple[jax.Array, KVCache]:
    """Adds n new positions per example to the cache and attends causally.

    Args:
      x: [batch, n, d_model], the inputs at positions start .. start + n - 1.
      cache: this layer's cache, [batch, positions, heads, head_dim].
      start: [batch] absolute position of x[:, 0] for every example.

    Returns:
      ([batch, n, d_model], updated cache).
    """
    q, k, v = self._split_heads(self.qkv(x), 3)
    cache = KVCache(ops.write_at(cache.key, k, start),
                    ops.write_at(cache.value, v, start))
    positions = start[:, None] + jnp.arange(x.shape[1])
    mask = causal_mask(positions, cache.key.shape[1])
    y = jax.nn.dot_product_attention(q, cache.key.astype(q.dtype),
                                     cache.value.astype(q.dtype), mask=mask)
    return self.out(self._merge_heads(y)), cache


class CrossAttention(_Projections):
  """Attention from decoder positions to the encoder output (the memory)."""

  def __init__(self, d_model: int, num_heads: int, *, dtype, param_dtype,
               rngs: nnx.Rngs):
    super().__init__(d_model, num_heads)
    linear = dict(dtype=dtype, param_dtype=param_dtype, rngs=rngs)
    self.query = nnx.Linear(d_model, d_model, **linear)
    self.key_value = nnx.Linear(d_model, 2 * d_model, **linear)
    self.out = nnx.Linear(d_model, d_model, **linear)

  def project_memory(self, memory: jax.Array) -> KVCache:
    """Keys and values of the memory, computed once per sequence.

    Args:
      memory: [batch, source_length, d_model].

    Returns:
      KVCache of [batch, source_length, heads, head_dim].
    """
    k, v = self._split_heads(self.key_value(memory), 2)
    return KVCache(k, v)

  def __call__(self, x: jax.Array, memory: KVCache,
               memory_valid: jax.Array) -> jax.Array:
    """Attends from x to the projected memory.

    Args:
      x: [batch, n, d_model].
      memory: projected memory, [batch, source_length, heads, head_dim].
      memory_valid: [batch, source_length] bool, False at padding.

    Returns:
      [batch, n, d_model].
    """
    (q,) = self._split_heads(self.query(x), 1)
    y = jax.nn.dot_product_attention(
        q, memory.key.astype(q.dtype), memory.value.astype(q.dtype),
        mask=padding_mask(memory_valid))
    return self.out(self._merge_heads(y))
