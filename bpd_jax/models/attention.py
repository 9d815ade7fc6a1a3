"""Multi-head attention with an explicit key/value cache.

Flax's built-in attention cache keeps one write index for the whole batch and
takes one token per call. Blockwise decoding needs more: one call scores the
k proposed positions of every example at once, and every example writes them
at its own offset (its own accepted length). So the cache here is an explicit
pytree, written with per-example offsets, and attention masks each query by
its own absolute position: a key written for a proposal that was later
rejected sits beyond the example's accepted length, is never attended to, and
is overwritten by the next call.

Local attention (the Image Transformer's local 1D attention, Parmar et al.
2018) restricts each query to its own query block and a fixed number of
positions before it (`LocalWindow`). Training computes it block by block;
cached decoding reads only a fixed-size window of the cache around the new
positions, so a decoding step costs the same at the first pixel of an image
as at the last, whatever the image size.

Keys and values may have fewer heads than queries (grouped-query attention,
multi-query at one): the cache then holds only those, and each group of
query heads attends to its shared key/value head. With rotary positions
(models/rotary.py) keys are cached as rotated at their absolute positions,
so an entry never changes once written.
"""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from bpd_jax.infra import ops
from bpd_jax.models import rotary as rotary_lib


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class KVCache:
  """Keys and values of one attention layer.

  Attributes:
    key: [batch, positions, kv_heads, head_dim].
    value: [batch, positions, kv_heads, head_dim].
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


@dataclasses.dataclass(frozen=True)
class LocalWindow:
  """Local 1D attention: which keys a query at absolute position q sees.

  Positions are cut into query blocks of `block` positions; a query sees the
  positions of its own block up to itself and the `memory` positions before
  the block: keys in [first_key(q), q].

  Attributes:
    block: query block length, >= 1.
    memory: positions before the block that its queries also see, >= 0.
  """
  block: int
  memory: int

  def first_key(self, query_positions: jax.Array) -> jax.Array:
    """The first key position each query sees (may be negative)."""
    return query_positions // self.block * self.block - self.memory

  def mask(self, query_positions: jax.Array,
           key_positions: jax.Array) -> jax.Array:
    """[batch, 1, n, keys] bool for [batch, n] queries and [batch, keys] keys."""
    q = query_positions[:, :, None]
    key = key_positions[:, None, :]
    return ((key <= q) & (key >= self.first_key(q)))[:, None]

  def span(self, n: int) -> int:
    """Keys that n consecutive queries can see together, at most."""
    return self.memory + self.block + n - 1


def padding_mask(key_valid: jax.Array) -> jax.Array:
  """[batch, 1, 1, keys] bool from [batch, keys] validity (True = attend)."""
  return key_valid[:, None, None, :]


def _scores(equation: str, q: jax.Array, keys: jax.Array) -> jax.Array:
  """Scaled dot-product scores of queries and keys (`equation`), in at
  least float32, as jax.nn.dot_product_attention (what decoding runs)
  computes them."""
  wide = jnp.promote_types(q.dtype, jnp.float32)
  scale = 1.0 / jnp.sqrt(jnp.asarray(q.shape[-1], wide))
  return jnp.einsum(equation, q, keys.astype(q.dtype),
                    preferred_element_type=wide) * scale


def attend_with_own_entries(q: jax.Array, keys: jax.Array, values: jax.Array,
                            mask: jax.Array, own_keys: list[jax.Array],
                            own_values: list[jax.Array]) -> jax.Array:
  """Attention over a sequence's keys plus entries of each query's own.

  What an unrolled drafting step attends to at every position t at once:
  the sequence's entries that `mask` lets t see, and the entries written
  at t by the steps before it and by itself, which no other position sees.
  Those join the scores as extra columns, one per step, instead of a
  [T, T] matrix a step.

  Args:
    q: [batch, T, heads, head_dim] queries, one per position.
    keys, values: [batch, S, heads, head_dim] the sequence's entries.
    mask: [batch, 1, T, S] bool, True where position t sees entry s.
    own_keys, own_values: lists of [batch, T, heads, head_dim]: entry j of
      every position t (the query's own entry among them).

  Returns:
    [batch, T, heads, head_dim] attended values.
  """
  scores = jnp.where(mask, _scores('bthd,bshd->bhts', q, keys), -jnp.inf)
  own = jnp.stack([_scores('bthd,bthd->bht', q, key) for key in own_keys],
                  axis=-1)
  weights, own_weights = _one_softmax(scores, own, q.dtype)
  return (jnp.einsum('bhts,bshd->bthd', weights, values.astype(q.dtype))
          + jnp.einsum('bhtj,jbthd->bthd', own_weights,
                       jnp.stack(own_values).astype(q.dtype)))


def attend_with_node_entries(q: jax.Array, keys: jax.Array,
                             values: jax.Array, mask: jax.Array,
                             node_keys: jax.Array, node_values: jax.Array,
                             node_mask: jax.Array) -> jax.Array:
  """Attention over a cache plus the entries of a tree's nodes.

  What a drafter's step attends to when it drafts a token tree level by
  level: the committed cache positions `mask` lets each query see, and
  the nodes on its own path (its ancestors and itself), whose entries are
  kept apart from the cache since sibling branches sit at the same
  positions.

  Args:
    q: [batch, W, heads, head_dim] the queries of a level's nodes.
    keys, values: [batch, S, heads, head_dim] the cache's entries.
    mask: [batch, 1, W or 1, S] bool, True where a query sees a cache
      entry.
    node_keys, node_values: [batch, M, heads, head_dim] the entries of the
      nodes drafted so far, this level's included.
    node_mask: [batch, W, M] bool, True on each query's own path.

  Returns:
    [batch, W, heads, head_dim] attended values.
  """
  # The two parts' scores share one softmax; the cache's entries are read
  # where they are, not copied beside the nodes' (a copy per tree level).
  scores = jnp.where(mask, _scores('bwhd,bshd->bhws', q, keys), -jnp.inf)
  node_scores = jnp.where(node_mask[:, None],
                          _scores('bwhd,bmhd->bhwm', q, node_keys), -jnp.inf)
  weights, node_weights = _one_softmax(scores, node_scores, q.dtype)
  return (jnp.einsum('bhws,bshd->bwhd', weights, values.astype(q.dtype))
          + jnp.einsum('bhwm,bmhd->bwhd', node_weights,
                       node_values.astype(q.dtype)))


def _one_softmax(scores: jax.Array, extra: jax.Array,
                 dtype) -> tuple[jax.Array, jax.Array]:
  """The weights of one softmax over the cache's scores [..., S] and
  further entries' [..., E], split back into the two parts (in `dtype`)."""
  weights = jax.nn.softmax(jnp.concatenate([scores, extra], axis=-1),
                           axis=-1).astype(dtype)
  length = scores.shape[-1]
  return weights[..., :length], weights[..., length:]


class _Projections(nnx.Module):
  """Shared shape logic: [..., heads * head_dim] <-> [..., heads, head_dim].

  Queries have `num_heads` heads, keys and values `num_kv_heads` (grouped-
  query attention when fewer: query head h reads key/value head
  h // (num_heads / num_kv_heads), as Hugging Face's repeat_kv pairs
  them), each `head_dim` wide.
  """

  def __init__(self, d_model: int, num_heads: int,
               num_kv_heads: int | None = None, head_dim: int | None = None):
    # The sizes are TransformerConfig's, checked there.
    head_dim = head_dim or d_model // num_heads
    num_kv_heads = num_kv_heads or num_heads
    self.num_heads = num_heads
    self.num_kv_heads = num_kv_heads
    self.head_dim = head_dim
    self.head_groups = 1  # See SelfAttention.group_heads.

  def _split_heads(self, x: jax.Array, *heads: int) -> list[jax.Array]:
    """[b, n, sum(heads) * head_dim] -> [b, n, h, head_dim] for each h of
    `heads`, in order.

    With head_groups g > 1 the columns come group by group, each group
    1/g of every part's heads (`SelfAttention.group_heads`); the parts
    come out in head order all the same.
    """
    groups = self.head_groups
    if groups > 1:
      x = x.reshape(x.shape[:-1] + (groups, x.shape[-1] // groups))
    parts, offset = [], 0
    for count in heads:
      width = count // groups * self.head_dim
      part = x[..., offset:offset + width]
      leading = part.shape[:-2] if groups > 1 else part.shape[:-1]
      parts.append(part.reshape(leading + (count, self.head_dim)))
      offset += width
    return parts

  def _merge_heads(self, x: jax.Array) -> jax.Array:
    return x.reshape(x.shape[:-2] + (self.num_heads * self.head_dim,))


class SelfAttention(_Projections):
  """Causal or bidirectional self-attention; fused query/key/value projection.

  `qkv`'s kernel is [d_model, (num_heads + 2 * num_kv_heads) * head_dim]:
  the query columns, then the keys', then the values' (a Hugging Face
  checkpoint's q, k and v weights transposed and concatenated); `out`'s
  is [num_heads * head_dim, d_model] (`group_heads` may reorder the qkv
  columns a group of heads at a time). With a `rotary`, queries and keys
  are rotated by their absolute positions before attending, and the cache
  holds the rotated keys.
  """

  def __init__(self, d_model: int, num_heads: int, *,
               num_kv_heads: int | None = None, head_dim: int | None = None,
               qkv_bias: bool = True, out_bias: bool = True,
               rotary: rotary_lib.Rotary | None = None, dtype, param_dtype,
               rngs: nnx.Rngs):
    """Creates the projections.

    Args:
      d_model: width of the layer's input and output.
      num_heads: query heads.
      num_kv_heads: key/value heads, dividing num_heads (None: num_heads).
      head_dim: width of a head (None: d_model // num_heads).
      qkv_bias: the query, key and value projections have biases.
      out_bias: the output projection has a bias.
      rotary: rotary position embeddings of queries and keys, or None.
      dtype: computation dtype (None: from inputs and params).
      param_dtype: parameter dtype.
      rngs: initialisation randomness.
    """
    super().__init__(d_model, num_heads, num_kv_heads, head_dim)
    linear = dict(dtype=dtype, param_dtype=param_dtype, rngs=rngs)
    width = (num_heads + 2 * self.num_kv_heads) * self.head_dim
    self.qkv = nnx.Linear(d_model, width, use_bias=qkv_bias, **linear)
    self.out = nnx.Linear(num_heads * self.head_dim, d_model,
                          use_bias=out_bias, **linear)
    self.rotary = rotary

  def group_heads(self, groups: int) -> None:
    """Lays `qkv`'s columns out in `groups` groups of whole heads.

    Group j holds the columns of query heads j * num_heads / groups ..
    and of the key and value heads they read, so that `qkv` split into
    `groups` equal column blocks gives each block whole heads of queries,
    keys and values: what the 'tensor' sharding rules split over a
    device mesh, each device then computing its own heads with no
    exchange (the fused [queries | keys | values] columns split evenly
    would cut across the three). The layer computes the same outputs.

    Args:
      groups: a divisor of num_kv_heads (1: the checkpoint's layout).
    """
    if self.num_kv_heads % groups:
      raise ValueError(f'{groups} head groups do not divide the '
                       f'{self.num_kv_heads} key/value heads.')
    heads = (self.num_heads, self.num_kv_heads, self.head_dim)
    # Column i holds the checkpoint's column now[i]; column j is to hold
    # its column wanted[j], which sits at argsort(now)[wanted[j]].
    now = grouped_columns(*heads, self.head_groups)
    wanted = grouped_columns(*heads, groups)
    order = np.argsort(now)[wanted]
    self.qkv.kernel[...] = self.qkv.kernel[...][:, order]
    if self.qkv.bias is not None:
      self.qkv.bias[...] = self.qkv.bias[...][order]
    self.head_groups = groups

  def project(self, x: jax.Array, positions: jax.Array | None = None
              ) -> list[jax.Array]:
    """[b, n, d_model] -> queries [b, n, heads, head_dim], keys and values
    [b, n, kv_heads, head_dim] (also for attention patterns built outside
    this module).

    Args:
      x: the inputs.
      positions: [b, n] their absolute positions, which a rotary layer
        rotates queries and keys by; None: 0 .. n - 1.
    """
    q, k, v = self._split_heads(self.qkv(x), self.num_heads,
                                self.num_kv_heads, self.num_kv_heads)
    if self.rotary is not None:
      if positions is None:
        positions = jnp.broadcast_to(jnp.arange(x.shape[1]), x.shape[:2])
      q, k = self.rotary(q, positions), self.rotary(k, positions)
    return [q, k, v]

  def output(self, y: jax.Array) -> jax.Array:
    """[b, n, heads, head_dim] attended values -> [b, n, d_model]."""
    return self.out(self._merge_heads(y))

  def __call__(self, x: jax.Array, mask: jax.Array,
               positions: jax.Array | None = None) -> jax.Array:
    """Uncached attention over the whole sequence (training, encoder).

    Args:
      x: [batch, length, d_model].
      mask: bool, broadcastable to [batch, heads, length, length].
      positions: [batch, length] absolute positions (rotary only); None:
        0 .. length - 1.

    Returns:
      [batch, length, d_model].
    """
    q, k, v = self.project(x, positions)
    y = jax.nn.dot_product_attention(q, k, v, mask=mask)
    return self.out(self._merge_heads(y))

  def local(self, x: jax.Array, window: LocalWindow) -> jax.Array:
    """Uncached local attention over a whole sequence (training, scoring).

    Equals `__call__` with `window.mask` as the mask, but computes only the
    [block, memory + block] score matrix of each query block: the cost grows
    linearly with the length.

    Args:
      x: [batch, length, d_model], positions 0 .. length - 1.
      window: the local pattern.

    Returns:
      [batch, length, d_model].
    """
    batch, length = x.shape[:2]
    size, memory = window.block, window.memory
    blocks = -(-length // size)
    q, k, v = self.project(x)
    # Keys of block b: positions b * size - memory .. (b + 1) * size - 1, read
    # from the sequence padded by `memory` in front and to whole blocks.
    pad = ((0, 0), (memory, blocks * size - length), (0, 0), (0, 0))
    keys = (jnp.arange(blocks)[:, None] * size
            + jnp.arange(memory + size)[None, :])  # Indices into the padding.
    k_blocks = jnp.pad(k, pad)[:, keys]  # [batch, blocks, span, heads, dim]
    v_blocks = jnp.pad(v, pad)[:, keys]
    q_blocks = jnp.pad(q, ((0, 0), (0, blocks * size - length), (0, 0),
                           (0, 0))).reshape(batch * blocks, size,
                                            *q.shape[2:])
    query_positions = (jnp.arange(blocks)[:, None] * size
                       + jnp.arange(size)[None, :])  # [blocks, size]
    mask = window.mask(query_positions, keys - memory)  # [blocks, 1, size, span]
    mask &= (keys - memory >= 0)[:, None, None, :]
    mask = jnp.broadcast_to(mask[None], (batch,) + mask.shape).reshape(
        batch * blocks, *mask.shape[1:])
    merge = lambda t: t.reshape(batch * blocks, *t.shape[2:])
    y = jax.nn.dot_product_attention(q_blocks, merge(k_blocks),
                                     merge(v_blocks), mask=mask)
    y = y.reshape(batch, blocks * size, *y.shape[2:])[:, :length]
    return self.out(self._merge_heads(y))

  def extend(self, x: jax.Array, cache: KVCache, start: jax.Array,
             window: LocalWindow | None = None) -> tuple[jax.Array, KVCache]:
    """Adds n new positions per example to the cache and attends causally.

    Args:
      x: [batch, n, d_model], the inputs at positions start .. start + n - 1.
      cache: this layer's cache, [batch, positions, kv_heads, head_dim].
      start: [batch] absolute position of x[:, 0] for every example.
      window: local attention; None: every earlier position. With a window
        only `window.span(n)` cache positions per example are read, from
        each example's own offset.

    Returns:
      ([batch, n, d_model], updated cache).
    """
    n = x.shape[1]
    positions = start[:, None] + jnp.arange(n)
    q, cache = self._write(x, cache, start, positions)
    keys, values = cache.key, cache.value
    if window is None:
      mask = causal_mask(positions, cache.key.shape[1])
    else:
      span = min(window.span(n), cache.key.shape[1])
      # Clamped like dynamic_slice clamps, so the positions below are the
      # ones read.
      first = jnp.clip(window.first_key(start), 0, cache.key.shape[1] - span)
      keys = ops.slice_at(keys, first, span)
      values = ops.slice_at(values, first, span)
      mask = window.mask(positions, first[:, None] + jnp.arange(span))
    y = jax.nn.dot_product_attention(q, keys.astype(q.dtype),
                                     values.astype(q.dtype), mask=mask)
    return self.out(self._merge_heads(y)), cache

  def _write(self, x: jax.Array, cache: KVCache, start: jax.Array,
             positions: jax.Array) -> tuple[jax.Array, KVCache]:
    """x's queries [batch, n, heads, head_dim], and the cache with x's keys
    and values written at each example's cache positions start .. start +
    n - 1; `positions` [batch, n] are the absolute positions a rotary
    layer rotates them by."""
    q, k, v = self.project(x, positions)
    return q, KVCache(ops.write_at(cache.key, k, start),
                      ops.write_at(cache.value, v, start))

  def extend_tree(self, x: jax.Array, cache: KVCache, start: jax.Array,
                  ancestors: jax.Array, positions: jax.Array
                  ) -> tuple[jax.Array, KVCache]:
    """Adds a token tree's n nodes per example and attends along it.

    The nodes are written at cache positions start .. start + n - 1, node
    order; node i attends to every position before `start` (the committed
    output) and, among the nodes, to its ancestors and itself: what it
    would attend to in a chain of its own path (`decoding/tree.py`).

    Args:
      x: [batch, n, d_model] the nodes' inputs.
      cache: this layer's cache.
      start: [batch] the root's (node 0's) absolute position.
      ancestors: [batch, n, n] bool, node j is node i or an ancestor of it.
      positions: [batch, n] each node's position in its path, start + its
        depth (what a rotary layer rotates by: a node's key, moved into
        place by `commit`, is then the chain's).

    Returns:
      ([batch, n, d_model], updated cache).
    """
    n = x.shape[1]
    q, cache = self._write(x, cache, start, positions)
    slot = jnp.arange(cache.key.shape[1])[None, :] - start[:, None]  # [b, L]
    node = jnp.broadcast_to(jnp.clip(slot, 0, n - 1)[:, None, :],
                            (x.shape[0], n, slot.shape[1]))
    among_nodes = jnp.take_along_axis(ancestors, node, axis=2)  # [b, n, L]
    mask = (slot < 0)[:, None, :] | (among_nodes & (slot < n)[:, None, :])
    y = jax.nn.dot_product_attention(q, cache.key.astype(q.dtype),
                                     cache.value.astype(q.dtype),
                                     mask=mask[:, None])
    return self.out(self._merge_heads(y)), cache


def grouped_columns(num_heads: int, num_kv_heads: int, head_dim: int,
                    groups: int) -> np.ndarray:
  """The fused [queries | keys | values] columns in `groups` groups: each
  group's share of the query heads, then of the key heads, then of the
  value heads (a permutation of the column indices)."""
  parts, start = [], 0
  for heads in (num_heads, num_kv_heads, num_kv_heads):
    width = heads * head_dim
    parts.append(start + np.arange(width).reshape(groups, width // groups))
    start += width
  return np.concatenate(parts, axis=1).reshape(-1)


class CrossAttention(_Projections):
  """Attention from decoder positions to the encoder output (the memory)."""

  def __init__(self, d_model: int, num_heads: int, *,
               num_kv_heads: int | None = None, head_dim: int | None = None,
               qkv_bias: bool = True, out_bias: bool = True, dtype,
               param_dtype, rngs: nnx.Rngs, own_memory: bool = True):
    """Creates the projections.

    Args:
      d_model: width of the queries and of the memory.
      num_heads: query heads.
      num_kv_heads: the memory's key/value heads, dividing num_heads
        (None: num_heads).
      head_dim: width of a head (None: d_model // num_heads).
      qkv_bias: the query and key/value projections have biases.
      out_bias: the output projection has a bias.
      dtype: computation dtype (None: from inputs and params).
      param_dtype: parameter dtype.
      rngs: initialisation randomness.
      own_memory: the layer projects the memory to keys and values
        (`project_memory`); False: it attends to keys and values another
        layer projected (a draft layer reading the base's), and holds only
        its query and output projections.
    """
    super().__init__(d_model, num_heads, num_kv_heads, head_dim)
    linear = dict(dtype=dtype, param_dtype=param_dtype, rngs=rngs)
    self.query = nnx.Linear(d_model, num_heads * self.head_dim,
                            use_bias=qkv_bias, **linear)
    if own_memory:
      self.key_value = nnx.Linear(d_model,
                                  2 * self.num_kv_heads * self.head_dim,
                                  use_bias=qkv_bias, **linear)
    self.out = nnx.Linear(num_heads * self.head_dim, d_model,
                          use_bias=out_bias, **linear)

  def project_memory(self, memory: jax.Array) -> KVCache:
    """Keys and values of the memory, computed once per sequence.

    Args:
      memory: [batch, source_length, d_model].

    Returns:
      KVCache of [batch, source_length, kv_heads, head_dim].
    """
    k, v = self._split_heads(self.key_value(memory), self.num_kv_heads,
                             self.num_kv_heads)
    return KVCache(k, v)

  def __call__(self, x: jax.Array, memory: KVCache,
               memory_valid: jax.Array) -> jax.Array:
    """Attends from x to the projected memory.

    Args:
      x: [batch, n, d_model].
      memory: projected memory, [batch, source_length, kv_heads, head_dim].
      memory_valid: [batch, source_length] bool, False at padding.

    Returns:
      [batch, n, d_model].
    """
    (q,) = self._split_heads(self.query(x), self.num_heads)
    y = jax.nn.dot_product_attention(
        q, memory.key.astype(q.dtype), memory.value.astype(q.dtype),
        mask=padding_mask(memory_valid))
    return self.out(self._merge_heads(y))


class BlockAttention(_Projections):
  """Attention of a block of positions to context entries and, both ways,
  to each other: a block drafter's (models/drafters/block.py).

  The context entries are keys and values projected from other inputs
  (the base's fused features at accepted positions) by the same
  projection as the block's own (`entries`), kept in a cache and rotated
  at their absolute positions; the block's queries see the context
  entries `visible` to them and every valid position of their own block,
  before or after them. `query` [d_model, heads * head_dim], `key_value`
  [d_model, 2 * heads * head_dim] (keys, then values), `out`
  [heads * head_dim, d_model].
  """

  def __init__(self, d_model: int, num_heads: int, *,
               head_dim: int | None = None,
               rotary: rotary_lib.Rotary | None = None, dtype, param_dtype,
               rngs: nnx.Rngs):
    super().__init__(d_model, num_heads, None, head_dim)
    linear = dict(dtype=dtype, param_dtype=param_dtype, rngs=rngs)
    self.query = nnx.Linear(d_model, num_heads * self.head_dim, **linear)
    self.key_value = nnx.Linear(d_model, 2 * num_heads * self.head_dim,
                                **linear)
    self.out = nnx.Linear(num_heads * self.head_dim, d_model, **linear)
    self.rotary = rotary

  def entries(self, x: jax.Array, positions: jax.Array) -> KVCache:
    """Keys and values of inputs x [b, n, d_model] at absolute positions
    [b, n]: [b, n, heads, head_dim] each, the keys rotated."""
    k, v = self._split_heads(self.key_value(x), self.num_heads,
                             self.num_heads)
    if self.rotary is not None:
      k = self.rotary(k, positions)
    return KVCache(k, v)

  def __call__(self, x: jax.Array, positions: jax.Array, context: KVCache,
               visible: jax.Array,
               block_valid: jax.Array | None = None) -> jax.Array:
    """Attends from every position of `a` blocks to the context and to
    its own block.

    Args:
      x: [b, a, n, d_model] the inputs of a blocks of n positions.
      positions: [b, a, n] their absolute positions.
      context: [b, S, heads, head_dim] context entries (`entries`).
      visible: [b, a, S] bool, the entries block a sees.
      block_valid: [b, a, n] bool, the positions of each block that exist
        (the others are neither attended to nor read); None: all.

    Returns:
      [b, a, n, d_model].
    """
    batch, blocks, n = x.shape[:3]
    flat = lambda t: t.reshape(batch, blocks * n, *t.shape[3:])
    (q,) = self._split_heads(self.query(flat(x)), self.num_heads)
    own = self.entries(flat(x), flat(positions))
    if self.rotary is not None:
      q = self.rotary(q, flat(positions))
    if blocks == 1:  # Decoding: one block a row.
      valid = None if block_valid is None else block_valid[:, 0]
      y = self._one_block(q, own, context, visible[:, 0], valid)
      return self.out(self._merge_heads(y))[:, None]
    block = lambda t: t.reshape(batch, blocks, n, *t.shape[2:])
    q, own_k, own_v = block(q), block(own.key), block(own.value)
    # Scores and softmax in at least float32, as
    # jax.nn.dot_product_attention computes them.
    wide = jnp.promote_types(q.dtype, jnp.float32)
    scale = 1.0 / jnp.sqrt(jnp.asarray(self.head_dim, wide))
    to_context = jnp.einsum('banhd,bshd->bahns', q,
                            context.key.astype(q.dtype),
                            preferred_element_type=wide) * scale
    to_context = jnp.where(visible[:, :, None, None, :], to_context, -jnp.inf)
    to_block = jnp.einsum('banhd,bamhd->bahnm', q, own_k,
                          preferred_element_type=wide) * scale
    if block_valid is not None:
      to_block = jnp.where(block_valid[:, :, None, None, :], to_block,
                           -jnp.inf)
    weights = jax.nn.softmax(jnp.concatenate([to_context, to_block], -1),
                             axis=-1).astype(q.dtype)
    length = context.key.shape[1]
    y = (jnp.einsum('bahns,bshd->banhd', weights[..., :length],
                    context.value.astype(q.dtype))
         + jnp.einsum('bahnm,bamhd->banhd', weights[..., length:], own_v))
    return self.out(self._merge_heads(y))

  @staticmethod
  def _one_block(q, own: KVCache, context: KVCache, visible, block_valid):
    """`__call__`'s attention where each row has one block (decoding):
    one attention over the context entries followed by the block's own, as
    the base's cached attention runs, in fewer kernels than the scores
    split in two (a decoding call's cost on a CPU or at batch 1 is mostly
    kernel launches).

    Args:
      q: [b, n, heads, head_dim] the block's rotated queries.
      own: its own entries, [b, n, heads, head_dim] each.
      context: [b, S, heads, head_dim] context entries.
      visible: [b, S] bool, the context entries the block sees.
      block_valid: [b, n] bool or None (all valid).

    Returns:
      [b, n, heads, head_dim] attended values.
    """
    keys = jnp.concatenate([context.key.astype(q.dtype), own.key], axis=1)
    values = jnp.concatenate([context.value.astype(q.dtype), own.value],
                             axis=1)
    own_valid = (jnp.ones(own.key.shape[:2], bool) if block_valid is None
                 else block_valid)
    mask = padding_mask(jnp.concatenate([visible, own_valid], axis=1))
    return jax.nn.dot_product_attention(q, keys, values, mask=mask)
