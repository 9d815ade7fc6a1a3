"""Differences between decodes, and whether near-ties explain them."""

import jax.numpy as jnp
import numpy as np
from flax import nnx

from bpd_jax.bench import near_ties
from bpd_jax.models import Transformer, TransformerConfig


def model():
  config = TransformerConfig(
      vocab_size=9, d_model=16, d_ff=32, num_heads=2, num_encoder_layers=1,
      num_decoder_layers=1, dropout_rate=0.0, max_source_len=6,
      max_target_len=16, tie_output=False)
  return Transformer(config, rngs=nnx.Rngs(0))


def test_a_tie_is_a_near_tie_and_a_clear_choice_is_not():
  m = model()
  inputs = np.array([[4, 5, 1, 0]])
  assert near_ties.top2_margin(m, inputs[0], [3]) > near_ties.RELATIVE_TOLERANCE
  # Only tokens 3 and 4 score, with identical output columns: they tie.
  column = m.output.kernel[:, 3] * 100
  m.output.kernel[...] = jnp.zeros_like(m.output.kernel[...]).at[
      :, 3].set(column).at[:, 4].set(column)
  assert near_ties.top2_margin(m, inputs[0], [3]) < (
      near_ties.RELATIVE_TOLERANCE)


def test_count_differences():
  m = model()
  inputs = np.array([[4, 5, 1, 0], [6, 1, 0, 0], [7, 7, 7, 1]])
  reference = np.array([[3, 4, 1], [5, 1, 0], [2, 2, 1]])
  same = near_ties.count_differences(m, inputs, reference, reference)
  assert same == (0, 0)
  other = reference.copy()
  other[1, 1] = 6
  other[2, 0] = 5
  differ, ties = near_ties.count_differences(m, inputs, reference, other)
  assert differ == 2 and 0 <= ties <= 2
