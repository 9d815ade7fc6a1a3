"""Differences between decodes, and whether near-ties explain them."""

import dataclasses

import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from bpd_jax.bench import near_ties
from bpd_jax.models import Transformer, TransformerConfig
from bpd_jax.models.mixture import OutputMixture


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


def test_a_mixture_outputs_margin_is_read_against_its_values():
  """The log-probabilities a mixture gives pad, eos and bos are of the
  values' own size: a clear choice stays clear."""
  config = dataclasses.replace(model().config, vocab_size=3 + 20,
                               mixture=OutputMixture(2, 3))
  m = Transformer(config, rngs=nnx.Rngs(0))
  m.mixture_output.kernel[...] = m.mixture_output.kernel[...] * 300
  inputs = np.array([4, 5, 1, 0])
  assert near_ties.top2_margin(m, inputs, [3]) > near_ties.RELATIVE_TOLERANCE


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


def test_padding_the_decoder_input_keeps_the_logits():
  encoder_decoder = model()
  decoder_only = Transformer(dataclasses.replace(
      encoder_decoder.config, num_encoder_layers=0), rngs=nnx.Rngs(1))
  inputs = np.array([4, 5, 1, 0])
  for m in (encoder_decoder, decoder_only):
    alone = near_ties.scoring_logits(m, inputs, [3, 6])
    padded = near_ties.scoring_logits(m, inputs, [3, 6], length=9)
    np.testing.assert_allclose(padded, alone, rtol=1e-5, atol=1e-5)
    assert np.abs(alone - near_ties.scoring_logits(m, inputs, [3, 7])).max() > 1e-3
  with pytest.raises(ValueError, match='length=2 is shorter'):
    near_ties.scoring_logits(encoder_decoder, inputs, [3, 6], length=2)
