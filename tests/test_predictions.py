"""Teacher-forced head predictions match what decoding sees."""

import numpy as np
import pytest
from flax import nnx

from bpd_jax import generate
from bpd_jax import predictions
from bpd_jax.models import Transformer, TransformerConfig


@pytest.mark.parametrize('encoder_layers', [2, 0])
def test_head_1_top_token_is_the_greedy_output(encoder_layers):
  model = Transformer(TransformerConfig.from_size(
      'tiny', vocab_size=16, num_encoder_layers=encoder_layers,
      num_proposal_heads=3, max_source_len=6, max_target_len=24),
      rngs=nnx.Rngs(1))
  # Right-padded sources (decoder-only: prompts, bos first).
  inputs = np.array([[2, 5, 6, 7, 1 if encoder_layers else 8], [2, 9, 0, 0, 0],
                     [2, 4, 4, 0, 0]])
  result = generate.greedy(model, inputs, max_len=10)
  outputs, lengths = np.asarray(result.tokens), np.asarray(result.lengths)
  top, confidence = predictions.head_predictions(model, inputs, outputs,
                                                 heads=3, top_t=2)
  assert top.shape == (3, outputs.shape[1], 3, 2)
  for row, length in enumerate(lengths):
    np.testing.assert_array_equal(np.asarray(top)[row, :length, 0, 0],
                                  outputs[row, :length])
  assert (np.asarray(confidence) <= 1).all()
