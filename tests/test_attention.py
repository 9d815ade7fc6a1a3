"""Attention: the explicit cache and its masks."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from bpd_jax.models import attention
from bpd_jax.models import rotary


def test_causal_mask_per_example_positions():
  mask = attention.causal_mask(jnp.array([[0, 1], [2, 3]]), 4)
  assert mask.shape == (2, 1, 2, 4)
  np.testing.assert_array_equal(mask[0, 0], [[1, 0, 0, 0], [1, 1, 0, 0]])
  np.testing.assert_array_equal(mask[1, 0], [[1, 1, 1, 0], [1, 1, 1, 1]])


def test_extend_ignores_entries_past_the_query():
  layer = attention.SelfAttention(8, 2, dtype=None, param_dtype=jnp.float32,
                                  rngs=nnx.Rngs(0))
  x = jax.random.normal(jax.random.key(0), (1, 3, 8))
  cache = attention.KVCache.zeros(1, 6, 2, 4, jnp.float32)
  clean, _ = layer.extend(x, cache, jnp.array([0]))
  # Stale keys/values at positions 3..5 (a rejected block) change nothing.
  stale = attention.KVCache(cache.key.at[:, 3:].set(9.0),
                            cache.value.at[:, 3:].set(-9.0))
  dirty, _ = layer.extend(x, stale, jnp.array([0]))
  np.testing.assert_allclose(clean, dirty, rtol=1e-6)
  # And it equals uncached causal attention.
  full = layer(x, attention.causal_mask(jnp.arange(3)[None], 3))
  np.testing.assert_allclose(clean, full, rtol=1e-5, atol=1e-6)


def test_cross_attention_ignores_padding():
  layer = attention.CrossAttention(8, 2, dtype=None, param_dtype=jnp.float32,
                                   rngs=nnx.Rngs(0))
  x = jax.random.normal(jax.random.key(0), (1, 2, 8))
  memory = jax.random.normal(jax.random.key(1), (1, 4, 8))
  valid = jnp.array([[True, True, False, False]])
  out = layer(x, layer.project_memory(memory), valid)
  other = memory.at[:, 2:].set(100.0)
  np.testing.assert_allclose(out, layer(x, layer.project_memory(other), valid),
                             rtol=1e-6)


def _layer():
  return attention.SelfAttention(8, 2, dtype=None, param_dtype=jnp.float32,
                                 rngs=nnx.Rngs(0))


@pytest.mark.parametrize('block,memory,length', [
    (4, 4, 16), (4, 4, 13), (3, 5, 17), (5, 0, 12), (1, 2, 7), (8, 8, 5)])
def test_local_attention_equals_full_attention_with_the_local_mask(
    block, memory, length):
  layer, window = _layer(), attention.LocalWindow(block, memory)
  x = jax.random.normal(jax.random.key(1), (2, length, 8))
  positions = jnp.broadcast_to(jnp.arange(length), (2, length))
  full = layer(x, window.mask(positions, positions))
  np.testing.assert_allclose(layer.local(x, window), full, rtol=1e-5,
                             atol=1e-6)


def test_local_window_mask_is_the_query_block_and_its_memory():
  window = attention.LocalWindow(block=3, memory=2)
  mask = window.mask(jnp.arange(7)[None], jnp.arange(7)[None])[0, 0]
  expected = np.array([[1, 0, 0, 0, 0, 0, 0],   # block [0, 3): keys from 0
                       [1, 1, 0, 0, 0, 0, 0],
                       [1, 1, 1, 0, 0, 0, 0],
                       [0, 1, 1, 1, 0, 0, 0],   # block [3, 6): keys from 1
                       [0, 1, 1, 1, 1, 0, 0],
                       [0, 1, 1, 1, 1, 1, 0],
                       [0, 0, 0, 0, 1, 1, 1]])  # block [6, 9): keys from 4
  np.testing.assert_array_equal(mask, expected)


@pytest.mark.parametrize('n', [1, 3, 5])
def test_local_extend_at_per_example_offsets_equals_full_local_attention(n):
  """The blockwise decoding pattern: each call writes n positions per
  example and keeps a random 1..n of them (the rest are rejected proposals,
  overwritten by the next call); the kept outputs equal full local
  attention."""
  layer, window = _layer(), attention.LocalWindow(4, 4)
  length, batch = 20, 3
  x = jax.random.normal(jax.random.key(2), (batch, length, 8))
  full = layer.local(x, window)
  cache = attention.KVCache.zeros(batch, length + n, 2, 4, jnp.float32)
  padded = jnp.pad(x, ((0, 0), (0, n), (0, 0)), constant_values=7.0)
  rng = np.random.default_rng(n)
  starts, checked = np.zeros(batch, int), 0
  while (starts < length).any():
    kept = np.minimum(rng.integers(1, n + 1, batch), length - starts)
    # Past the kept positions: junk, as rejected proposals are.
    junk = jax.random.normal(jax.random.key(int(starts.sum())), (n, 8)) * 5
    chunk = jnp.stack([jnp.where(jnp.arange(n)[:, None] < kept[i],
                                 padded[i, starts[i]:starts[i] + n], junk)
                       for i in range(batch)])
    y, cache = layer.extend(chunk, cache, jnp.asarray(starts), window)
    for i in range(batch):
      got, want = y[i, :kept[i]], full[i, starts[i]:starts[i] + kept[i]]
      np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
      checked += kept[i]
    starts = starts + kept
  assert checked == batch * length


def test_local_extend_reads_a_window_whose_size_is_independent_of_the_cache():
  layer, window = _layer(), attention.LocalWindow(4, 4)
  x = jax.random.normal(jax.random.key(3), (1, 2, 8))

  def gathered(positions):
    cache = attention.KVCache.zeros(1, positions, 2, 4, jnp.float32)
    jaxpr = jax.make_jaxpr(lambda c: layer.extend(x, c, jnp.array([40]),
                                                  window))(cache)
    return [e.outvars[0].aval.shape for e in jaxpr.eqns
            if e.primitive.name == 'dot_general']

  # The attention products have the same shapes for a 64- and a 4096-long
  # cache: the step's cost does not grow with the sequence.
  assert gathered(64) == gathered(4096)


def _grouped(rotate=None, **kwargs):
  """4 query heads of width 8 over 2 key/value heads, on d_model 16."""
  return attention.SelfAttention(16, 4, num_kv_heads=2, head_dim=8,
                                 rotary=rotate, dtype=None,
                                 param_dtype=jnp.float32, rngs=nnx.Rngs(0),
                                 **kwargs)


def _with_repeated_kv_heads(grouped):
  """A full multi-head layer whose key/value head h is the grouped layer's
  head h // 2 (Hugging Face's repeat_kv): the same attention."""
  full = attention.SelfAttention(16, 4, head_dim=8, rotary=grouped.rotary,
                                 dtype=None, param_dtype=jnp.float32,
                                 rngs=nnx.Rngs(1))
  repeat = lambda w: jnp.repeat(w.reshape(w.shape[:-1] + (2, 8)), 2,
                                axis=-2).reshape(w.shape[:-1] + (32,))
  for name in ('kernel', 'bias'):
    w = getattr(grouped.qkv, name)[...]
    q, k, v = w[..., :32], w[..., 32:48], w[..., 48:]
    getattr(full.qkv, name)[...] = jnp.concatenate(
        [q, repeat(k), repeat(v)], axis=-1)
    getattr(full.out, name)[...] = getattr(grouped.out, name)[...]
  return full


@pytest.mark.parametrize('rotate', [None, rotary.Rotary(8, 100.0)])
def test_grouped_query_attention_is_full_attention_with_repeated_kv_heads(
    rotate):
  grouped = _grouped(rotate)
  full = _with_repeated_kv_heads(grouped)
  x = jax.random.normal(jax.random.key(4), (2, 6, 16))
  mask = attention.causal_mask(jnp.broadcast_to(jnp.arange(6), (2, 6)), 6)
  np.testing.assert_allclose(grouped(x, mask), full(x, mask), rtol=1e-5,
                             atol=1e-6)
  # Cached, at each example's own offset: the cache holds 2 heads, not 4.
  start = jnp.asarray([0, 3])
  out, cache = grouped.extend(x[:, :3], attention.KVCache.zeros(
      2, 8, 2, 8, jnp.float32), start)
  assert cache.key.shape == (2, 8, 2, 8)
  expected, _ = full.extend(x[:, :3], attention.KVCache.zeros(
      2, 8, 4, 8, jnp.float32), start)
  np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-6)


def test_head_dim_and_biases_set_the_projections():
  layer = _grouped(qkv_bias=True, out_bias=False)
  params = nnx.state(layer, nnx.Param)
  assert params['qkv']['kernel'].shape == (16, (4 + 2 * 2) * 8)
  assert params['qkv']['bias'].shape == ((4 + 2 * 2) * 8,)
  assert set(params['out']) == {'kernel'}
  assert params['out']['kernel'].shape == (32, 16)
  bare = _grouped(qkv_bias=False, out_bias=False)
  assert all(set(p) == {'kernel'} for p in nnx.state(bare, nnx.Param).values())


def test_rotary_cache_holds_rotated_keys_and_extends_as_the_full_pass():
  rotate = rotary.Rotary(8, 100.0)
  layer = _grouped(rotate)
  x = jax.random.normal(jax.random.key(5), (2, 7, 16))
  positions = jnp.broadcast_to(jnp.arange(7), (2, 7))
  full = layer(x, attention.causal_mask(positions, 7))
  # Example 0 extends 3 then 4 positions, example 1 5 then 2.
  cache = attention.KVCache.zeros(2, 9, 2, 8, jnp.float32)
  first, cache = layer.extend(x[:, :5], cache, jnp.asarray([0, 0]))
  second, cache = layer.extend(
      jnp.stack([x[0, 3:7], jnp.pad(x[1, 5:7], ((0, 2), (0, 0)))]), cache,
      jnp.asarray([3, 5]))
  np.testing.assert_allclose(first[0, :3], full[0, :3], rtol=1e-5, atol=1e-6)
  np.testing.assert_allclose(second[0], full[0, 3:], rtol=1e-5, atol=1e-6)
  np.testing.assert_allclose(first[1], full[1, :5], rtol=1e-5, atol=1e-6)
  np.testing.assert_allclose(second[1, :2], full[1, 5:], rtol=1e-5,
                             atol=1e-6)
  _, keys, _ = layer.project(x, positions)
  unrotated = layer.qkv(x)[..., 32:48].reshape(2, 7, 2, 8)
  np.testing.assert_allclose(keys, rotate(unrotated, positions), rtol=1e-6)
  np.testing.assert_allclose(cache.key[:, :7], keys, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize('heads,kv_heads,groups', [(8, 8, 4), (8, 2, 2),
                                                   (4, 4, 4)])
def test_grouped_heads_compute_the_same_outputs(heads, kv_heads, groups):
  """q/k/v columns laid out a group of heads at a time (as the 'tensor'
  sharding rules split them) give the same queries, keys, values and
  outputs, bit for bit; grouping back restores the checkpoint's layout."""
  layer = attention.SelfAttention(
      16, heads, num_kv_heads=kv_heads, head_dim=4,
      rotary=rotary.Rotary(4, 500.0), dtype=None, param_dtype=jnp.float32,
      rngs=nnx.Rngs(0))
  kernel, bias = layer.qkv.kernel[...], layer.qkv.bias[...]
  x = jax.random.normal(jax.random.key(0), (2, 3, 16))
  cache = attention.KVCache.zeros(2, 5, kv_heads, 4, jnp.float32)
  start = jnp.array([0, 2])
  before = (layer.project(x), layer.extend(x, cache, start))
  layer.group_heads(groups)
  assert not np.array_equal(layer.qkv.kernel[...], kernel)
  # Group 0's columns: its queries, then its keys, then its values.
  q, k = heads // groups * 4, kv_heads // groups * 4
  np.testing.assert_array_equal(layer.qkv.kernel[...][:, :q], kernel[:, :q])
  np.testing.assert_array_equal(layer.qkv.kernel[...][:, q:q + k],
                                kernel[:, heads * 4:heads * 4 + k])
  after = (layer.project(x), layer.extend(x, cache, start))
  jax.tree.map(np.testing.assert_array_equal, after, before)
  layer.group_heads(1)
  np.testing.assert_array_equal(layer.qkv.kernel[...], kernel)
  np.testing.assert_array_equal(layer.qkv.bias[...], bias)
  with pytest.raises(ValueError, match='3 head groups do not divide'):
    layer.group_heads(3)
