"""Sequential heads: each reads the previous head's state and token."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from bpd_jax.models import TransformerConfig
from bpd_jax.models import drafters


def sequential(k=5):
  config = TransformerConfig(vocab_size=10, d_model=8, d_ff=16, num_heads=2,
                             num_proposal_heads=k, head_layer='sequential',
                             head_hidden=6)
  return drafters.get('sequential')(config, rngs=nnx.Rngs(0))


def view(h, previous):
  """A training view whose tokens embed as the given vectors
  [..., m, d]: next_tokens[..., j] embeds as previous[..., j, :]."""
  table = previous.reshape(-1, previous.shape[-1])
  tokens = jnp.arange(table.shape[0]).reshape(previous.shape[:-1])
  return drafters.TrainingView(hidden=h, features=h, source=None,
                               next_tokens=tokens,
                               embed=lambda ids: table[ids])


def sequential_reference(heads, h, previous):
  """The sequential heads' chain written out in numpy, head after head."""
  w_in, b_in = np.asarray(heads.w_in[...]), np.asarray(heads.b_in[...])
  w_out, b_out = np.asarray(heads.w_out[...]), np.asarray(heads.b_out[...])
  states = [np.asarray(h)]
  for i in range(previous.shape[-2]):
    x = np.concatenate([states[-1], np.asarray(previous[..., i, :])], -1)
    hidden = np.maximum(x @ w_in[i] + b_in[i], 0.0)
    states.append(states[-1] + hidden @ w_out[i] + b_out[i])
  return np.stack(states, axis=-2)


def test_sequential_heads_chain_each_state_and_previous_token():
  heads = sequential()
  h = jax.random.normal(jax.random.key(1), (3, 2, 8))
  previous = jax.random.normal(jax.random.key(2), (3, 2, 4, 8))
  expected = sequential_reference(heads, h, previous)
  np.testing.assert_allclose(heads.states(view(h, previous), 0, 5),
                             expected, rtol=1e-5, atol=1e-5)
  np.testing.assert_array_equal(
      heads.states(view(h, previous), 0, 1)[..., 0, :], h)
  for first in range(5):
    for count in range(1, 5 - first + 1):
      np.testing.assert_allclose(
          heads.states(view(h, previous), first, count),
          expected[..., first:first + count, :], rtol=1e-5, atol=1e-5)
  # Head 3 reads head 2's token: changing it changes heads 3.. only.
  changed = previous.at[..., 1, :].add(1.0)
  moved = np.asarray(heads.states(view(h, changed), 0, 5))
  np.testing.assert_allclose(moved[..., :2, :], expected[..., :2, :],
                             rtol=1e-5, atol=1e-5)
  assert not np.allclose(moved[..., 2, :], expected[..., 2, :])


def test_rows_are_the_positions_of_every_position():
  heads = sequential()
  h = jax.random.normal(jax.random.key(1), (3, 6, 8))
  previous = jax.random.normal(jax.random.key(2), (3, 6, 4, 8))
  rows = jnp.array([[5, 0], [2, 2], [1, 3]])
  every = heads.states(view(h, previous), 1, 4)
  np.testing.assert_allclose(
      heads.states(view(h, previous), 1, 4, rows),
      jnp.take_along_axis(every, rows[..., None, None], axis=1), rtol=1e-6)


def test_sequential_heads_need_the_previous_tokens():
  heads = sequential(4)
  h = jnp.ones((2, 8))
  no_tokens = drafters.TrainingView(hidden=h, features=h, source=None,
                                    next_tokens=None, embed=lambda t: t)
  with pytest.raises(ValueError, match='read the 2 tokens before theirs'):
    heads.states(no_tokens, 1, 2)
  with pytest.raises(TypeError, match='call draft_tokens'):
    heads.proposal_states(None, 4)
