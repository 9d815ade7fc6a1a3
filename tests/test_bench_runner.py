"""The benchmark runner: rows present, ratios computed right, no recompiles."""

import numpy as np
import pytest
from flax import nnx

from bpd_jax import auto_k
from bpd_jax import generate
from bpd_jax.bench import runner
from bpd_jax.bench import settings as settings_lib
from bpd_jax.models import Transformer, TransformerConfig
from bpd_jax.tasks import batching


def test_figures_of_known_timings():
  # Greedy 4 s, the setting 2 s: twice as fast. 3 tokens a call with calls
  # that cost T(1) = 1 ms, T(k) = 2 ms allow 3 x 1 / 2 = 1.5x, so the
  # implementation delivers 2 / 1.5 of it. 10 iterations of 0.15 s beyond
  # the 2 decode calls' first: 2 - 8 x 0.15 = 0.8 s outside them, 0.4 s a
  # call.
  figures = runner.figures(
      wall_s=2.0, reference_wall_s=4.0, tokens=60, mean_block=3.0,
      iterations=10, decode_calls=2, iteration_s=0.15, step_cost_1=1e-3,
      step_cost_k=2e-3)
  assert figures == dict(
      wall_s=2.0, tokens=60, tokens_per_s=30.0, step_cost_1_ms=1.0,
      step_cost_k_ms=2.0, step_cost_ratio=2.0, iteration_ms=150.0,
      fixed_ms=400.0, speedup=2.0, efficiency=1.333)
  # A tree: no k-position call bounds it.
  tree = runner.figures(
      wall_s=2.0, reference_wall_s=1.0, tokens=60, mean_block=3.0,
      iterations=10, decode_calls=2, iteration_s=0.15, step_cost_1=1e-3,
      step_cost_k=None)
  assert (tree['speedup'], tree['efficiency'], tree['step_cost_k_ms'],
          tree['step_cost_ratio']) == (0.5, None, None, None)


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
  batches = {b: list(batching.eval_batches(sources, b, 8, pad_id=0))
             for b in (1, 4)}
  inputs = batching.pad_rows(sources, 8, pad_id=0)
  decoder = generate.Decoder(model)
  # Few block sizes: each k compiles its step-cost, loop and decode programs
  # at each batch size.
  tuning = auto_k.tune_k(decoder, inputs, max_len=10, candidates=(3,))
  settings = settings_lib.sweep([3], tuning=tuning, max_len=10) + [
      settings_lib.setting(10, 3, 'top-k:2', 2)]
  return runner.run(decoder, batches, settings, repeats=2,
                    quality=lambda tokens: float(len(tokens)),
                    progress=lambda line: None)


def test_a_row_per_batch_size_and_setting(rows):
  assert len(rows) == 2 * 4
  assert all(set(row) == set(runner.COLUMNS) for row in rows)
  assert [row['batch_size'] for row in rows] == [1] * 4 + [4] * 4
  assert [row['decoder'] for row in rows[:4]] == [
      'greedy', 'blockwise', 'auto', 'blockwise']
  assert all(list(row) == list(runner.COLUMNS) for row in rows)
  # Each program's first call compiled it: far more than a whole round of
  # decodes with the compiled program (what a second call costs) takes.
  assert all(row['compile_s'] > row['wall_s'] for row in rows
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
  batches = {4: list(batching.eval_batches(sources, 4, 8, pad_id=0))}
  settings = settings_lib.sweep([3], samplers=['temperature=0.8'],
                               max_len=10)
  rows = runner.run(generate.Decoder(model), batches, settings, repeats=1,
                    progress=lambda line: None)
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


def test_rows_read_their_own_reference_and_costs(rows):
  # The arithmetic is `figures`' (test_figures_of_known_timings); here each
  # row must feed it its batch size's greedy wall, its own k's T(k), and
  # greedy's peak memory.
  for row in rows:
    greedy = next(r for r in rows if r['batch_size'] == row['batch_size']
                  and r['decoder'] == 'greedy')
    same_k = [r['step_cost_k_ms'] for r in rows
              if r['batch_size'] == row['batch_size'] and r['k'] == row['k']]
    assert set(same_k) == {row['step_cost_k_ms']}
    assert row['step_cost_1_ms'] == greedy['step_cost_k_ms']
    assert row['speedup'] == pytest.approx(greedy['wall_s'] / row['wall_s'],
                                           rel=0.01, abs=0.002)
    assert row['memory_vs_greedy'] == pytest.approx(
        row['peak_memory_mb'] / greedy['peak_memory_mb'], rel=0.01)
    assert row['quality'] == 5.0
  # Settings that score more positions a call hold more memory.
  at_1 = [row for row in rows if row['batch_size'] == 1]
  assert at_1[1]['memory_vs_greedy'] > 1.0 and at_1[0]['k'] == 1


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
    runner.run(None, {}, settings_lib.sweep([2], max_len=4)[1:])


def test_tree_rows_and_an_auto_that_chose_a_tree(rows):
  del rows  # Compiled greedy and k=3 at batch 4 (the programs are shared).
  model = tiny_model()
  decoder = generate.Decoder(model)
  sources = [[5, 6, 7, 1], [3, 4, 1], [8, 1]]
  batches = {4: list(batching.eval_batches(sources, 4, 8, pad_id=0))}
  tuning = auto_k.tune_k(decoder, batching.pad_rows(sources, 8, pad_id=0),
                         max_len=10, candidates=(3,), tree_sizes=(4,),
                         top_t=2)
  (tree,) = tuning.trees
  # Costs that make auto take the tree at this shape.
  tuning.step_costs[(4, 8, 10)] = {1: 9.0, 3: 9.0, tree: 1.0}
  settings = settings_lib.sweep([3], trees=['2', 'dynamic:4,top=2'],
                               tuning=tuning,
                               drafters=['lookup:min=1'], max_len=10)
  rows = runner.run(decoder, batches, settings, repeats=1,
                    progress=lambda line: None)
  assert [(row['decoder'], row['k'], row['tree'], row['drafter'])
          for row in rows] == [
      ('greedy', 1, None, None), ('blockwise', 3, None, None),
      ('blockwise', 3, 'tree:5', None),
      ('blockwise', 3, 'dynamic:4,top=2', None),
      ('blockwise', 3, None, 'lookup:min=1'),
      ('blockwise', 3, 'tree:4', None), ('auto', 3, 'tree:4', None)]
  dynamic = rows.pop(3)  # Made each call from the drafter's q: exact.
  assert dynamic['identical_to_greedy'] == 1.0
  lookup = rows.pop(3)  # A prompt lookup: bounded by T(k), exact.
  assert lookup['identical_to_greedy'] == 1.0 and lookup['step_cost_k_ms']
  # The tuning's tree decodes on its own row as auto decoded with it.
  assert rows[3]['model_calls'] == rows[-1]['model_calls']
  # The auto row shows the costs it chose by; the others have none.
  assert rows[-1]['auto_iteration_ms'] == {'1': 9000.0, '3': 9000.0,
                                           'tree:4': 1000.0}
  assert all(row['auto_iteration_ms'] is None for row in rows[:-1])
  for row in rows[2:]:
    assert row['identical_to_greedy'] == 1.0 and row['recompiles'] == 0
    # A tree's call scores its nodes: no k-position bound.
    assert row['step_cost_k_ms'] is None and row['efficiency'] is None
    assert row['iteration_ms'] > 0 and row['memory_vs_greedy'] > 1.0
