"""Plain and refined decoding side by side: rows and their ratios."""

import statistics

import numpy as np
import pytest
from flax import nnx

from bpd_jax import generate
from bpd_jax.decoding import Refinement
from bpd_jax.drafts import compare
from bpd_jax.models import Transformer, TransformerConfig


def test_rows_compare_each_refinement_with_plain_at_its_k():
  config = TransformerConfig(
      vocab_size=9, d_model=16, d_ff=32, num_heads=2, num_encoder_layers=1,
      num_decoder_layers=1, dropout_rate=0.0, max_source_len=6,
      max_target_len=24, num_proposal_heads=3, head_hidden=16)
  decoder = generate.Decoder(Transformer(config, rngs=nnx.Rngs(0)))
  rng = np.random.default_rng(0)
  batches = [(np.concatenate([rng.integers(2, 9, (2, 5)),
                              np.ones((2, 1), int)], axis=1), real)
             for real in (2, 1)]  # The last batch has one real row.
  spec = 'none:p=2,t=2'
  chosen = compare.variants([3], [(spec, Refinement.from_spec(spec))],
                            max_len=12)
  assert [v.name for v in chosen] == ['greedy', 'k=3 plain',
                                      'k=3 none:p=2,t=2']
  rows = compare.run(decoder, batches, chosen, {}, repeats=2,
                     progress=lambda _: None)
  greedy, plain, refined = rows
  for row in rows:
    assert row['identical_to_greedy'] == 1.0
    assert len(row['walls']) == 2
  assert greedy['tokens'] == plain['tokens'] == refined['tokens']
  assert refined['model_calls'] <= plain['model_calls'] <= greedy['tokens']
  assert refined['block_gain'] == round(
      refined['mean_block'] / plain['mean_block'] - 1, 4)
  assert refined['speedup_vs_plain'] == pytest.approx(
      plain['wall_s'] / refined['wall_s'], abs=2e-3)
  assert plain['wall_s'] == pytest.approx(statistics.median(plain['walls']),
                                         abs=1e-6)
