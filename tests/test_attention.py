"""Attention: the explicit cache and its masks."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from bpd_jax.models import attention


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


def test_heads_must_divide_width():
  with pytest.raises(ValueError, match='d_model=10 must be divisible by '
                     'num_heads=4'):
    attention.SelfAttention(10, 4, dtype=None, param_dtype=jnp.float32,
                            rngs=nnx.Rngs(0))
