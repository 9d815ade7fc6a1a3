"""Teacher-forced head predictions match what decoding sees."""

import numpy as np
import pytest
from flax import nnx

from bpd_jax import generate
from bpd_jax import predictions
from bpd_jax.models import Transformer, TransformerConfig


def tiny_model(encoder_layers, pad_id=0):
  return Transformer(TransformerConfig.from_size(
      'tiny', vocab_size=16, num_encoder_layers=encoder_layers,
      num_proposal_heads=3, max_source_len=6, max_target_len=24,
      pad_id=pad_id), rngs=nnx.Rngs(1))


def padded_inputs(encoder_layers, pad_id=0):
  """Right-padded sources (decoder-only: prompts, bos first)."""
  inputs = np.array([[2, 5, 6, 7, 1 if encoder_layers else 8],
                     [2, 9, 0, 0, 0], [2, 4, 4, 0, 0]])
  return np.where(inputs == 0, pad_id, inputs)


@pytest.mark.parametrize('encoder_layers', [2, 0])
def test_head_1_top_token_is_the_greedy_output(encoder_layers):
  model = tiny_model(encoder_layers)
  inputs = padded_inputs(encoder_layers)
  result = generate.greedy(model, inputs, max_len=10)
  outputs, lengths = np.asarray(result.tokens), np.asarray(result.lengths)
  top, confidence = predictions.head_predictions(model, inputs, outputs,
                                                 heads=3, top_t=2)
  assert top.shape == (3, outputs.shape[1], 3, 2)
  for row, length in enumerate(lengths):
    np.testing.assert_array_equal(np.asarray(top)[row, :length, 0, 0],
                                  outputs[row, :length])
  assert (np.asarray(confidence) <= 1).all()


@pytest.mark.parametrize('encoder_layers', [2, 0])
def test_padding_with_minus_one_predicts_as_padding_with_0(encoder_layers):
  # pad_id=-1 (no vocabulary id pads): the same weights' predictions at
  # every output position, the outputs -1 past their ends.
  predicted = []
  for pad_id in (0, -1):
    model = tiny_model(encoder_layers, pad_id)
    inputs = padded_inputs(encoder_layers, pad_id)
    result = generate.greedy(model, inputs, max_len=10)
    outputs, lengths = np.asarray(result.tokens), np.asarray(result.lengths)
    assert (outputs[np.arange(10) >= lengths[:, None]] == pad_id).all()
    top, _ = predictions.head_predictions(model, inputs, outputs, heads=3,
                                          top_t=2)
    real = np.arange(10)[None, :] < lengths[:, None]
    predicted.append((np.asarray(top)[real], lengths))
  np.testing.assert_array_equal(predicted[1][1], predicted[0][1])
  np.testing.assert_array_equal(predicted[1][0], predicted[0][0])
