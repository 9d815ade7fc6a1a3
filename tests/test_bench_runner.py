"""The benchmark runner: rows present, ratios computed right, no recompiles."""

import numpy as np
import pytest
from flax import nnx

from bpd_jax import auto_k
from bpd_jax import generate
from bpd_jax.bench import runner
from bpd_jax.models import Transformer, TransformerConfig
from bpd_jax.tasks import batching


def test_sweep_order_and_combinations():
  settings = runner.sweep([2, 4], ['exact', 'top-k:2'], [1, 3])
  names = [s.name for s in settings]
  assert names == ['greedy', 'k=2', 'k=4', 'k=4 l=3', 'k=2 top-k:2',
                   'k=4 top-k:2', 'k=4 top-k:2 l=3', 'auto']
  assert runner.sweep([2], auto=False)[-1].name == 'k=2'
  sampled = runner.sweep([2, 4], ['exact', 'top-k:2', 'typical:0.3,0.09'],
                         auto=False, samplers=['temperature=0.7'])
  assert [s.name for s in sampled if s.sampler] == [
      'ancestral temperature=0.7', 'k=2 temperature=0.7',
      'k=4 temperature=0.7', 'k=2 typical:0.3,0.09 temperature=0.7',
      'k=4 typical:0.3,0.09 temperature=0.7']


def test_sweep_refuses_a_bad_criterion():
  with pytest.raises(ValueError, match="criterion 'top3'"):
    runner.sweep([2], ['top3'])


def tiny_model():
  return Transformer(TransformerConfig(
      vocab_size=12, d_model=16, d_ff=32, num_heads=2, num_encoder_layers=1,
      num_decoder_layers=1, dropout_rate=0.0, max_source_len=8,
      max_target_len=32, num_proposal_heads=3), rngs=nnx.Rngs(0))


@pytest.fixture(scope='module')
def rows():
  model = tiny_model()
  rng = np.random.default_rng(0)
  sources = [list(rng.integers(3, 12, rng.integers(1, 8))) + [1]
             for _ in range(5)]
  batches = {b: list(batching.eval_batches(sources, b, 8)) for b in (1, 4)}
  inputs = batching.pad_rows(sources, 8)
  decoder = generate.Decoder(model)
  # Few block sizes: each k compiles its step-cost, loop and decode programs
  # at each batch size.
  tuning = auto_k.tune_k(decoder, inputs, max_len=10, candidates=(3,))
  settings = runner.sweep([3]) + [runner.setting(3, 'top-k:2', 2)]
  return runner.run(decoder, batches, settings, max_len=10, repeats=2,
                    tuning=tuning, quality=lambda tokens: float(len(tokens)),
                    progress=lambda line: None)


def test_a_row_per_batch_size_and_setting(rows):
  assert len(rows) == 2 * 4
  assert all(set(row) == set(runner.COLUMNS) for row in rows)
  assert [row['batch_size'] for row in rows] == [1] * 4 + [4] * 4
  assert [row['decoder'] for row in rows[:4]] == [
      'greedy', 'blockwise', 'auto', 'blockwise']
  # Each program's first call compiled it (the timings after it reuse it).
  assert all(row['compile_s'] > 0 for row in rows
             if row['decoder'] != 'auto')
  # The heads' parameters: 2 independent heads (heads 2, 3), each a
  # 16 -> 32 -> 16 feed-forward layer with biases.
  assert {(row['head_layer'], row['head_params']) for row in rows} == {
      ('independent', 2 * (16 * 32 + 32 + 32 * 16 + 16))}


def test_sampling_rows_are_timed_against_ancestral_sampling(rows):
  del rows  # Compiled greedy and k=3 at this shape (the programs are shared).
  # One batch size, the fixture's: each sampling setting compiles its decode.
  model = tiny_model()
  sources = [[5, 6, 7, 1], [3, 4, 1], [8, 1]]
  batches = {4: list(batching.eval_batches(sources, 4, 8))}
  settings = runner.sweep([3], auto=False, samplers=['temperature=0.8'])
  rows = runner.run(generate.Decoder(model), batches, settings, max_len=10,
                    repeats=1, progress=lambda line: None)
  assert [(row['decoder'], row['k'], row['sampler']) for row in rows] == [
      ('greedy', 1, None), ('blockwise', 3, None),
      ('ancestral', 1, 'temperature=0.8'),
      ('blockwise', 3, 'temperature=0.8')]
  ancestral, sampled = rows[2], rows[3]
  assert ancestral['speedup'] == 1.0
  assert sampled['speedup'] == pytest.approx(
      ancestral['wall_s'] / sampled['wall_s'], rel=0.01, abs=0.002)
  for row in (ancestral, sampled):  # Drawn tokens: nothing to match.
    assert row['identical_to_greedy'] is None
    assert row['differences'] is None and row['recompiles'] == 0
  assert sampled['model_calls'] * sampled['mean_accepted_block'] == (
      pytest.approx(sampled['tokens'], rel=0.01))


def test_ratios(rows):
  for row in rows:
    greedy = next(r for r in rows if r['batch_size'] == row['batch_size']
                  and r['decoder'] == 'greedy')
    assert row['speedup'] == pytest.approx(greedy['wall_s'] / row['wall_s'],
                                           rel=0.01, abs=0.002)
    bound = (row['mean_accepted_block'] * row['step_cost_1_ms']
             / row['step_cost_k_ms'])
    assert row['efficiency'] == pytest.approx(row['speedup'] / bound,
                                              rel=0.01, abs=0.002)
    assert row['tokens_per_s'] == pytest.approx(row['tokens'] / row['wall_s'],
                                                rel=0.01)
    assert row['memory_vs_greedy'] == pytest.approx(
        row['peak_memory_mb'] / greedy['peak_memory_mb'], rel=0.01)
    assert row['quality'] == 5.0
    calls = {1: 5, 4: 2}[row['batch_size']]  # Decode calls of 5 sentences.
    assert row['fixed_ms'] == pytest.approx(
        (row['wall_s'] * 1e3 - (row['iterations'] - calls)
         * row['iteration_ms']) / calls, rel=0.02, abs=1e-3)


def test_exact_rows_equal_greedy_and_nothing_recompiles(rows):
  for row in rows:
    assert row['recompiles'] == 0
    if row['criterion'] == 'exact' and row['min_block'] == 1:
      assert row['identical_to_greedy'] == 1.0
      assert row['differences'] == 0
    if row['decoder'] == 'greedy':
      assert (row['k'], row['speedup'], row['efficiency'],
              row['mean_accepted_block']) == (1, 1.0, 1.0, 1.0)
    assert row['model_calls'] * row['mean_accepted_block'] == pytest.approx(
        row['tokens'], rel=0.01)


def test_first_setting_must_be_greedy():
  with pytest.raises(ValueError, match='must be greedy'):
    runner.run(None, {}, runner.sweep([2])[1:], max_len=4)


def test_tree_rows_and_an_auto_that_chose_a_tree(rows):
  del rows  # Compiled greedy and k=3 at batch 4 (the programs are shared).
  assert [s.name for s in runner.sweep([2, 3], trees=['2'], auto=False)] == [
      'greedy', 'k=2', 'k=3', 'k=2 tree=2', 'k=3 tree=2']
  model = tiny_model()
  decoder = generate.Decoder(model)
  sources = [[5, 6, 7, 1], [3, 4, 1], [8, 1]]
  batches = {4: list(batching.eval_batches(sources, 4, 8))}
  tuning = auto_k.tune_k(decoder, batching.pad_rows(sources, 8), max_len=10,
                         candidates=(3,), tree_sizes=(4,), top_t=2)
  (tree,) = tuning.trees
  # Costs that make auto take the tree at this shape.
  tuning.step_costs[(4, 8, 10)] = {1: 9.0, 3: 9.0, tree: 1.0}
  settings = runner.sweep([3], trees=['2'])
  rows = runner.run(decoder, batches, settings, max_len=10, repeats=1,
                    tuning=tuning, progress=lambda line: None)
  assert [(row['decoder'], row['k'], row['tree']) for row in rows] == [
      ('greedy', 1, None), ('blockwise', 3, None),
      ('blockwise', 3, 'tree:5'), ('auto', 3, 'tree:4')]
  # The auto row shows the costs it chose by; the others have none.
  assert rows[-1]['auto_iteration_ms'] == {'1': 9000.0, '3': 9000.0,
                                           'tree:4': 1000.0}
  assert all(row['auto_iteration_ms'] is None for row in rows[:-1])
  for row in rows[2:]:
    assert row['identical_to_greedy'] == 1.0 and row['recompiles'] == 0
    # A tree's call scores its nodes: no k-position bound.
    assert row['step_cost_k_ms'] is None and row['efficiency'] is None
    assert row['iteration_ms'] > 0 and row['memory_vs_greedy'] > 1.0
