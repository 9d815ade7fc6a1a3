"""The harness: output gathering, the interleaved runner, shared rows."""

import types

import numpy as np
import pytest
from flax import nnx

from bpd_jax import evaluation
from bpd_jax import generate
from bpd_jax.evaluation import runner
from bpd_jax.evaluation.spec import DecoderSpec
from bpd_jax.models import Transformer, TransformerConfig


def test_gather_keeps_the_real_rows_only():
  def result(tokens, lengths, calls, iterations, k):
    return types.SimpleNamespace(
        tokens=np.asarray(tokens), lengths=np.asarray(lengths),
        model_calls=np.asarray(calls), iterations=iterations,
        block_sizes=np.zeros((len(lengths), k + 1)))
  batches = [(None, 2), (None, 1)]  # The second batch: one real row.
  out = runner.gather([result([[1, 2], [3, 4]], [2, 1], [1, 1], 1, 3),
                       result([[5, 6], [7, 8]], [2, 2], [2, 9], 2, 3)],
                      batches)
  np.testing.assert_array_equal(out.tokens, [[1, 2], [3, 4], [5, 6]])
  np.testing.assert_array_equal(out.lengths, [2, 1, 2])
  assert (out.example_calls, out.iterations, out.k) == (4, 3, 3)
  assert out.mean_block == pytest.approx(5 / 4)


def tiny_decoder(seed: int) -> generate.Decoder:
  """A random 3-head encoder-decoder of 9 tokens, sources of 6."""
  config = TransformerConfig(
      vocab_size=9, d_model=16, d_ff=32, num_heads=2, num_encoder_layers=1,
      num_decoder_layers=1, dropout_rate=0.0, max_source_len=6,
      max_target_len=24, num_proposal_heads=3, head_hidden=16)
  return generate.Decoder(Transformer(config, rngs=nnx.Rngs(seed)))


def test_interleaved_rounds_equal_greedy_without_recompiling():
  decoder = tiny_decoder(seed=0)
  rng = np.random.default_rng(0)
  batches = [(np.concatenate([rng.integers(2, 9, (2, 5)),
                              np.ones((2, 1), int)], axis=1), real)
             for real in (2, 1)]
  specs = [DecoderSpec.of(12), DecoderSpec.of(12, 3)]
  rounds = []
  greedy, blockwise = evaluation.run(decoder, batches, specs, repeats=3,
                                     progress=rounds.append)
  assert sum(line.startswith('timed round') for line in rounds) == 3
  for run in (greedy, blockwise):
    assert len(run.walls) == 3 and run.wall_s == sorted(run.walls)[1]
    assert run.recompiles == 0
    assert run.outputs.tokens.shape == (3, 12)
  np.testing.assert_array_equal(blockwise.outputs.tokens,
                                greedy.outputs.tokens)
  assert (greedy.outputs.k, blockwise.outputs.k) == (1, 3)
  assert greedy.outputs.example_calls == greedy.outputs.lengths.sum()
  rows = runner.comparison_rows([greedy, blockwise], specs)
  assert [(row['decoder'], row['k']) for row in rows] == [
      ('greedy', 1), ('blockwise k=3', 3)]
  # compile_s is the first call's extra time: these programs are compiled
  # now, so a second run finds next to none.
  again = evaluation.run(decoder, batches, specs)
  for before, after in zip((greedy, blockwise), again):
    assert after.compile_s < 0.25 * before.compile_s


def test_greedy_comes_first():
  with pytest.raises(ValueError, match=r'the first decoder must be greedy '
                     r'\(k=1\), the reference; got blockwise k=2'):
    evaluation.run(None, [], [DecoderSpec.of(4, 2)])


def test_rounds_go_chunk_by_chunk_over_the_batches_in_order():
  # About a tenth of the batches a chunk, every batch once, in order.
  assert runner._chunks(25) == [range(i, min(i + 3, 25))  # pylint: disable=protected-access
                                for i in range(0, 25, 3)]
  assert runner._chunks(3) == [range(0, 1), range(1, 2), range(2, 3)]  # pylint: disable=protected-access
  assert runner._chunks(500)[1] == range(50, 100)  # pylint: disable=protected-access
  decoder = tiny_decoder(seed=1)
  rng = np.random.default_rng(1)
  batches = [(np.concatenate([rng.integers(2, 9, (1, 5)),
                              np.ones((1, 1), int)], axis=1), 1)
             for _ in range(13)]
  greedy, = evaluation.run(decoder, batches, [DecoderSpec.of(12)],
                           repeats=2)
  alone = [np.asarray(decoder.greedy(inputs, max_len=12).tokens)
           for inputs, _ in batches]
  np.testing.assert_array_equal(greedy.outputs.tokens, np.concatenate(alone))
