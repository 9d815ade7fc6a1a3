"""Feed-forward layers: plain and gated, with and without biases."""

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from bpd_jax.models import feed_forward


def layer(**kwargs):
  return feed_forward.FeedForward(8, 12, param_dtype=jnp.float32,
                                  rngs=nnx.Rngs(0), **kwargs)


def test_gated_is_down_of_act_gate_times_up():
  ffn = layer(kind='gated', activation='silu', use_bias=False)
  x = jax.random.normal(jax.random.key(1), (2, 3, 8))
  silu = lambda h: h / (1 + jnp.exp(-h))
  expected = (silu(x @ ffn.gate.kernel[...]) * (x @ ffn.up.kernel[...])
              ) @ ffn.down.kernel[...]
  np.testing.assert_allclose(ffn(x, None), expected, rtol=1e-5, atol=1e-6)
  params = nnx.state(ffn, nnx.Param)
  assert set(params) == {'gate', 'up', 'down'}
  assert all(set(params[name]) == {'kernel'} for name in params)


def test_plain_has_no_gate_and_keeps_its_biases():
  ffn = layer(activation='relu')
  assert not hasattr(ffn, 'gate')
  assert set(nnx.state(ffn, nnx.Param)['up']) == {'kernel', 'bias'}


def test_hidden_dropout_only_with_randomness():
  ffn = layer(kind='gated', activation='silu', dropout_rate=0.5)
  x = jax.random.normal(jax.random.key(1), (2, 3, 8))
  np.testing.assert_array_equal(ffn(x, None), ffn(x, None))
  assert not np.allclose(ffn(x, nnx.Rngs(dropout=0)), ffn(x, None))


