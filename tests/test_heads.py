"""Proposal heads: layouts, head 1 from the base model, sizes."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from bpd_jax.models import ProposalHeads


@pytest.mark.parametrize('layer', ['joint', 'independent'])
@pytest.mark.parametrize('head1_from_base', [True, False])
def test_any_range_of_heads_equals_slice_of_all(layer, head1_from_base):
  heads = ProposalHeads(8, 5, 6, layer=layer,
                        head1_from_base=head1_from_base, rngs=nnx.Rngs(0))
  h = jax.random.normal(jax.random.key(1), (3, 2, 8))
  every = heads(h, 0, 5)
  assert every.shape == (3, 2, 5, 8)
  for first in range(5):
    for count in range(1, 5 - first + 1):
      np.testing.assert_allclose(heads(h, first, count),
                                 every[..., first:first + count, :],
                                 rtol=1e-6, atol=1e-6)


def test_head1_from_base_is_the_decoder_output():
  heads = ProposalHeads(8, 4, 6, head1_from_base=True, rngs=nnx.Rngs(0))
  h = jax.random.normal(jax.random.key(1), (2, 8))
  np.testing.assert_array_equal(heads(h, 0, 1)[:, 0], h)
  through_layer = ProposalHeads(8, 4, 6, head1_from_base=False,
                                rngs=nnx.Rngs(0))
  assert not np.allclose(through_layer(h, 0, 1)[:, 0], h)


def test_heads_are_residual():
  heads = ProposalHeads(8, 3, 6, rngs=nnx.Rngs(0))
  heads.w_out[...] = jnp.zeros_like(heads.w_out[...])
  h = jax.random.normal(jax.random.key(1), (2, 8))
  np.testing.assert_allclose(heads(h, 0, 3), jnp.stack([h] * 3, axis=1))


def weights(heads):
  return sum(x.size for x in jax.tree.leaves(nnx.state(heads, nnx.Param)))


def test_joint_layer_size_at_paper_scale():
  # k=8, Transformer base, every head through the layer: hidden 8 * 2048,
  # output 8 * 512, as in the paper (~75M weights).
  joint = nnx.eval_shape(lambda: ProposalHeads(
      512, 8, 2048, layer='joint', head1_from_base=False, rngs=nnx.Rngs(0)))
  assert weights(joint) == (512 * 16384 + 16384 + 16384 * 4096 + 4096)
  independent = nnx.eval_shape(lambda: ProposalHeads(
      512, 8, 2048, layer='independent', head1_from_base=False,
      rngs=nnx.Rngs(0)))
  assert weights(independent) == 8 * (512 * 2048 + 2048 + 2048 * 512 + 512)


def test_single_base_head_has_no_layer():
  heads = ProposalHeads(8, 1, 6, rngs=nnx.Rngs(0))
  assert weights(heads) == 0


@pytest.mark.parametrize('first,count', [(0, 5), (4, 1), (-1, 1)])
def test_heads_out_of_range(first, count):
  heads = ProposalHeads(8, 4, 6, rngs=nnx.Rngs(0))
  with pytest.raises(ValueError, match='the model has heads 1..4'):
    heads(jnp.zeros((1, 8)), first, count)


def test_bad_layer():
  with pytest.raises(ValueError, match="head layer 'dense' is not one of"):
    ProposalHeads(8, 4, 6, layer='dense', rngs=nnx.Rngs(0))


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
  heads = ProposalHeads(8, 5, 6, layer='sequential', rngs=nnx.Rngs(0))
  h = jax.random.normal(jax.random.key(1), (3, 2, 8))
  previous = jax.random.normal(jax.random.key(2), (3, 2, 4, 8))
  expected = sequential_reference(heads, h, previous)
  np.testing.assert_allclose(heads(h, 0, 5, previous), expected, rtol=1e-5,
                             atol=1e-5)
  np.testing.assert_array_equal(heads(h, 0, 1, previous)[..., 0, :], h)
  for first in range(5):
    for count in range(1, 5 - first + 1):
      np.testing.assert_allclose(
          heads(h, first, count, previous),
          expected[..., first:first + count, :], rtol=1e-5, atol=1e-5)
  # Head 3 reads head 2's token: changing it changes heads 3.. only.
  changed = previous.at[..., 1, :].add(1.0)
  moved = np.asarray(heads(h, 0, 5, changed))
  np.testing.assert_allclose(moved[..., :2, :], expected[..., :2, :],
                             rtol=1e-5, atol=1e-5)
  assert not np.allclose(moved[..., 2, :], expected[..., 2, :])


def test_sequential_heads_need_the_previous_tokens_and_head1_from_base():
  heads = ProposalHeads(8, 4, 6, layer='sequential', rngs=nnx.Rngs(0))
  h = jnp.ones((2, 8))
  with pytest.raises(ValueError, match='need the embeddings of 2 earlier'):
    heads(h, 1, 2)
  with pytest.raises(ValueError, match='need the embeddings of 3 earlier'):
    heads(h, 0, 4, jnp.ones((2, 2, 8)))
  with pytest.raises(ValueError, match='head1_from_base must be True'):
    ProposalHeads(8, 4, 6, layer='sequential', head1_from_base=False,
                  rngs=nnx.Rngs(0))
