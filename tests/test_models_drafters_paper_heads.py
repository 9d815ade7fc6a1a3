"""The paper's heads: layouts, head 1 from the base model, sizes."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from bpd_jax.models import TransformerConfig
from bpd_jax.models import drafters


def heads_of(layer='independent', k=5, head1_from_base=True, d_model=8,
             hidden=6):
  config = TransformerConfig(vocab_size=10, d_model=d_model, d_ff=16,
                             num_heads=2, num_proposal_heads=k,
                             head_layer=layer, head_hidden=hidden,
                             head1_from_base=head1_from_base)
  return drafters.get(layer)(config, rngs=nnx.Rngs(0))


def states(heads, h, first, count):
  return heads.apply(heads.head_weights(first, count), h)


@pytest.mark.parametrize('layer', ['joint', 'independent'])
@pytest.mark.parametrize('head1_from_base', [True, False])
def test_any_range_of_heads_equals_slice_of_all(layer, head1_from_base):
  heads = heads_of(layer, head1_from_base=head1_from_base)
  h = jax.random.normal(jax.random.key(1), (3, 2, 8))
  every = states(heads, h, 0, 5)
  assert every.shape == (3, 2, 5, 8)
  for first in range(5):
    for count in range(1, 5 - first + 1):
      np.testing.assert_allclose(states(heads, h, first, count),
                                 every[..., first:first + count, :],
                                 rtol=1e-6, atol=1e-6)


def test_head1_from_base_is_the_decoder_output():
  heads = heads_of(k=4)
  h = jax.random.normal(jax.random.key(1), (2, 8))
  np.testing.assert_array_equal(states(heads, h, 0, 1)[:, 0], h)
  assert heads.scoring_weights(jnp.float32) is None
  through_layer = heads_of(k=4, head1_from_base=False)
  assert not np.allclose(states(through_layer, h, 0, 1)[:, 0], h)
  assert through_layer.scoring_weights(jnp.float32) is not None


def test_heads_are_residual():
  heads = heads_of(k=3)
  heads.w_out[...] = jnp.zeros_like(heads.w_out[...])
  h = jax.random.normal(jax.random.key(1), (2, 8))
  np.testing.assert_allclose(states(heads, h, 0, 3),
                             jnp.stack([h] * 3, axis=1))


def weights(heads):
  return sum(x.size for x in jax.tree.leaves(nnx.state(heads, nnx.Param)))


def test_joint_layer_size_at_paper_scale():
  # k=8, Transformer base, every head through the layer: hidden 8 * 2048,
  # output 8 * 512, as in the paper (~75M weights).
  joint = nnx.eval_shape(lambda: heads_of(
      'joint', 8, False, d_model=512, hidden=2048))
  assert weights(joint) == (512 * 16384 + 16384 + 16384 * 4096 + 4096)
  independent = nnx.eval_shape(lambda: heads_of(
      'independent', 8, False, d_model=512, hidden=2048))
  assert weights(independent) == 8 * (512 * 2048 + 2048 + 2048 * 512 + 512)


def test_single_base_head_has_no_layer():
  assert weights(heads_of(k=1)) == 0


@pytest.mark.parametrize('first,count', [(0, 5), (4, 1), (-1, 1)])
def test_heads_out_of_range(first, count):
  heads = heads_of(k=4)
  with pytest.raises(ValueError, match='the model has heads 1..4'):
    heads.head_weights(first, count)
