"""Draft statistics: the simulated blocks are the decoder's blocks."""

import jax
import numpy as np
import pytest
from flax import nnx

from bpd_jax import generate
from bpd_jax import predictions
from bpd_jax.drafts import analysis
from bpd_jax.models import Transformer, TransformerConfig

import repeating_drafters

VOCAB = 7


def random_model(head_layer='independent'):
  config = TransformerConfig(head_layer=head_layer,
      vocab_size=VOCAB, d_model=16, d_ff=32, num_heads=2,
      num_encoder_layers=1, num_decoder_layers=1, dropout_rate=0.0,
      max_source_len=8, max_target_len=40, num_proposal_heads=4,
      head_hidden=16, dtype='float64', param_dtype='float64')
  model = Transformer(config, rngs=nnx.Rngs(1))
  # Often right: the heads towards head 1's token (the draft layer towards
  # passing the base's feature through).
  repeating_drafters.scale_heads(model, 0.3)
  return model


@pytest.mark.parametrize('head_layer', [
    # The draft layer by default: it reads earlier proposals and the source.
    pytest.param('independent', marks=pytest.mark.slow),
    pytest.param('sequential', marks=pytest.mark.slow), 'autoregressive'])
def test_simulated_blocks_equal_decoded_and_oracle_bounds(head_layer):
  """Heads that read earlier proposals are fed the greedy tokens: up to a
  draft's first miss those are the proposals, so the counts still match."""
  with jax.enable_x64(True):
    model = random_model(head_layer)
    rng = np.random.default_rng(0)
    sources = np.concatenate([rng.integers(2, VOCAB, (6, 5)),
                              np.ones((6, 1), int)], axis=1)
    max_len = 30
    greedy = generate.greedy(model, sources, max_len=max_len)
    outputs, lengths = np.asarray(greedy.tokens), np.asarray(greedy.lengths)
    top, conf = predictions.head_predictions(model, sources, outputs,
                                             heads=4, top_t=VOCAB)
    top, conf = np.asarray(top), np.asarray(conf)
    for k in (2, 4):
      decoded = generate.blockwise(model, sources, k=k, max_len=max_len)
      tokens, calls = analysis.simulate_blocks(top, outputs, lengths, k, 1)
      assert tokens == int(lengths.sum())
      assert calls == int(np.asarray(decoded.model_calls).sum())
      efficiency = [tokens / analysis.simulate_blocks(
          top, outputs, lengths, k, t)[1] for t in range(1, VOCAB + 1)]
      assert efficiency == sorted(efficiency)  # More tokens, more hits.
      # Every token in the top VOCAB: each call takes k tokens.
      perfect = sum(1 + -(-(int(n) - 1) // k) for n in lengths)
      assert analysis.simulate_blocks(top, outputs, lengths, k,
                                      VOCAB)[1] == perfect
    stats = analysis.confidence(top, conf, outputs, lengths)
    assert stats['accuracy'][0] == 1.0  # Head 1 is the greedy token.
    assert all(0 < p <= 1 for p in stats['mean_max_prob'])


def test_repetition_counts_adjacent_equal_tokens():
  # One example of 3 tokens; drafts of k = 3 at each position.
  top = np.array([[[[4], [4], [5]], [[5], [6], [6]], [[1], [1], [1]],
                   [[0], [0], [0]]]])  # Position 3 lies past the end.
  outputs = np.array([[4, 4, 1, 0]])
  stats = analysis.repetition(top, outputs, np.array([3]), k=3)
  assert stats['draft_pairs'] == round(4 / 6, 4)  # 4,4 / 6,6 / 1,1 1,1.
  assert stats['drafts_with_repeat'] == 1.0
  assert stats['output_pairs'] == 0.5  # 4,4 and 4,1.
