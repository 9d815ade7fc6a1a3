"""k='auto': statistics, the expected-time model, the choice, generate."""

import types

import numpy as np
import pytest
from flax import nnx

from bpd_jax import auto_k
from bpd_jax import decoding
from bpd_jax import generate
from bpd_jax.infra import sharding
from bpd_jax.models import Transformer, TransformerConfig

# Two examples, max_k = 4: the first always has 4 tokens a call (8 tokens in
# 2 calls), the second 1 token a call (3 tokens in 3 calls).
APPENDED = np.array([[0, 0, 0, 0, 2], [0, 3, 0, 0, 0]])


def test_mean_block_cuts_runs_at_k():
  tuning = auto_k.AutoK(APPENDED)
  assert tuning.max_k == 4
  np.testing.assert_allclose(tuning.mean_block(4), [4, 1])
  np.testing.assert_allclose(tuning.mean_block(2), [2, 1])
  np.testing.assert_allclose(tuning.mean_block(1), [1, 1])


def test_expected_calls_of_the_slowest_example():
  tuning = auto_k.AutoK(APPENDED)
  # Batch 1: the mean over examples; k=4: 8/4 = 2 and 3 calls.
  assert tuning.expected_calls(4, 1) == pytest.approx(2.5, abs=0.15)
  # Large batches almost surely hold both examples: the slower one counts.
  assert tuning.expected_calls(1, 64) == pytest.approx(8)
  assert tuning.expected_calls(4, 64) == pytest.approx(3)


@pytest.mark.parametrize('content, message', [
    (None, 'FileNotFoundError'),
    (b'{not json', 'Expecting property name'),
    (b'[1, 2]', 'TypeError'),
    (b'{"appended": [[0, 1]]}', "KeyError: 'candidates'"),
    (b'{"appended": [[0, 1]], "candidates": null, "criterion": "exact", '
     b'"margin": NaN, "step_costs": []}', r'margin=nan must be in \[0, 1\)'),
])
def test_a_file_that_is_no_tuning_is_one_value_error_naming_it(
    tmp_path, content, message):
  path = tmp_path / 'auto_k.json'
  if content is not None:
    path.write_bytes(content)
  with pytest.raises(ValueError, match=rf"^{path} is not a k='auto' tuning "
                     rf'AutoK.save wrote: .*{message}') as raised:
    auto_k.AutoK.load(path)
  assert '\n' not in str(raised.value)


def test_choice_follows_the_step_costs():
  tuning = auto_k.AutoK(np.array([[0, 0, 0, 0, 5]]), margin=0.05)
  # Calls at k: 20 / k. Cheap blocks: the largest k wins.
  assert tuning.choose_from({1: 1.0, 2: 1.1, 4: 1.2}, 1) == 4
  # k-position calls as dear as k greedy calls and more: greedy.
  assert tuning.choose_from({1: 1.0, 2: 2.2, 4: 4.4}, 1) == 1
  # A gain inside the margin is not taken: greedy 20 calls x 1.0 = 20;
  # k=4 5 calls x 3.85 = 19.25 > 0.95 x 20, but 5 x 3.7 = 18.5 < 19.
  assert tuning.choose_from({1: 1.0, 4: 3.85}, 1) == 1
  assert tuning.choose_from({1: 1.0, 4: 3.7}, 1) == 4


def test_save_and_load(tmp_path):
  tuning = auto_k.AutoK(APPENDED, 'top-k:2', 0.1, (2, 4),
                        appended_at={2: np.array([[0, 0, 4], [0, 3, 0]])})
  tuning.step_costs[(8, 12, 30)] = {1: 0.5, 2: 0.7, 4: 0.9}
  tuning.save(tmp_path / 'auto_k.json')
  loaded = auto_k.AutoK.load(tmp_path / 'auto_k.json')
  np.testing.assert_array_equal(loaded.appended, APPENDED)
  np.testing.assert_array_equal(loaded.appended_at[2],
                                tuning.appended_at[2])
  assert (loaded.criterion, loaded.margin, loaded.candidates) == (
      'top-k:2', 0.1, (1, 2, 4))
  assert loaded.step_costs == tuning.step_costs


@pytest.mark.parametrize('kwargs,message', [
    (dict(appended=np.zeros((2, 3))), 'at least one call'),
    (dict(appended=APPENDED, margin=1.0), 'margin=1.0'),
    (dict(appended=APPENDED, candidates=(2, 5)), r'candidates \[5\]'),
])
def test_bad_statistics(kwargs, message):
  with pytest.raises(ValueError, match=message):
    auto_k.AutoK(**kwargs)


def model_and_inputs(head_layer='independent'):
  config = TransformerConfig(
      vocab_size=11, d_model=16, d_ff=32, num_heads=2, num_encoder_layers=1,
      num_decoder_layers=1, dropout_rate=0.0, max_source_len=8,
      max_target_len=32, num_proposal_heads=3, head_layer=head_layer)
  model = Transformer(config, rngs=nnx.Rngs(0))
  inputs = np.random.default_rng(0).integers(3, 11, (4, 6)).astype(np.int32)
  return model, inputs


@pytest.mark.parametrize('head_layer', [
    # A one-pass and a dependent drafter by default; the others slow.
    pytest.param('independent', marks=pytest.mark.slow),
    pytest.param('sequential', marks=pytest.mark.slow),
    'autoregressive', 'block'])
def test_tune_k_records_each_examples_blocks_at_the_largest_k(head_layer):
  """Every head type: a draft of k - 1 proposals is the first k - 1 of the
  largest k's, so that decode's blocks give every k's statistics."""
  model, inputs = model_and_inputs(head_layer)
  decoder = generate.Decoder(model)
  tuning = auto_k.tune_k(decoder, inputs, max_len=12, batch_size=3,
                         every_k=False)
  assert tuning.appended.shape == (4, 4) and not tuning.appended_at
  reference = decoder.blockwise(inputs, k=3, max_len=12)
  np.testing.assert_array_equal(tuning.appended, reference.block_sizes)


def test_tune_k_measures_each_smaller_candidate():
  model, inputs = model_and_inputs()
  decoder = generate.Decoder(model)
  tuning = auto_k.tune_k(decoder, inputs, max_len=12, batch_size=4)
  assert list(tuning.appended_at) == [2]
  at_2 = decoder.blockwise(inputs, k=2, max_len=12)
  np.testing.assert_array_equal(tuning.appended_at[2], at_2.block_sizes)
  np.testing.assert_allclose(tuning.calls(2),
                             np.asarray(at_2.model_calls))
  np.testing.assert_allclose(tuning.mean_block(2), np.asarray(
      at_2.lengths) / np.asarray(at_2.model_calls))


def test_tune_k_on_a_mesh_repeats_rows_up_to_its_data_axis():
  # 4 calibration rows in batches of 3 over a data axis of 2: the batch
  # of 1 left over is decoded as 2 rows, and its repeat left out.
  model, inputs = model_and_inputs()
  mesh = sharding.make_mesh((2,), ('data',))
  tuning = auto_k.tune_k(generate.Decoder(model, mesh=mesh), inputs,
                         max_len=12, batch_size=3, every_k=False)
  reference = generate.Decoder(model).blockwise(inputs, k=3, max_len=12)
  np.testing.assert_array_equal(tuning.appended, reference.block_sizes)


def test_measured_blocks_replace_the_estimate():
  # Example 0's calls at k=2 were measured: 3 calls (2 + 2 + 1 of its
  # 5 tokens), not 5 / 2 from the k=4 decode's blocks cut at 2.
  tuning = auto_k.AutoK(np.array([[0, 1, 0, 0, 1], [0, 3, 0, 0, 0]]),
                        appended_at={2: np.array([[0, 1, 2], [0, 3, 0]])})
  np.testing.assert_allclose(tuning.mean_block(2), [5 / 3, 1])
  np.testing.assert_allclose(tuning.calls(2), [3, 3])
  np.testing.assert_allclose(tuning.mean_block(3), [2.0, 1])  # Estimated.
  with pytest.raises(ValueError, match=r'appended_at\[4\] must be'):
    auto_k.AutoK(APPENDED, appended_at={4: np.zeros((2, 5))})


def test_auto_decodes_with_the_k_the_costs_favour():
  model, inputs = model_and_inputs()
  # Every calibration call appended 3 tokens: fewer calls at every larger k.
  tuning = auto_k.AutoK(np.array([[0, 0, 0, 4]] * 4))
  reference = generate.greedy(model, inputs, max_len=12)
  for costs, expected in (({1: 1.0, 2: 1.0, 3: 1.0}, 3),
                          ({1: 1.0, 2: 1.1, 3: 9.0}, 2),
                          ({1: 1.0, 2: 9.0, 3: 9.0}, 1)):
    tuning.step_costs = {(4, 6, 12): costs}
    tuning._choices.clear()  # pylint: disable=protected-access
    auto = auto_k.AutoDecoder(generate.Decoder(model), tuning)
    result = auto.decode(inputs, max_len=12)
    np.testing.assert_array_equal(result.tokens, reference.tokens)
    assert result.block_sizes.shape[1] - 1 == expected  # k + 1 columns.
    # The options it chose for this shape.
    assert auto.options(4, 6, max_len=12) == decoding.DecodeOptions(
        max_len=12, k=expected)


def test_a_plain_decoder_never_times_and_points_to_auto_decoder(
    monkeypatch):
  model, inputs = model_and_inputs()
  monkeypatch.setattr(auto_k.timing, 'loop_iteration_seconds', None)
  with pytest.raises(ValueError, match='auto_k.AutoDecoder'):
    generate.Decoder(model).blockwise(inputs, k='auto', max_len=8)
  with pytest.raises(ValueError, match='not a decoding.DecodeOptions'):
    generate.Decoder(model).decode(inputs, auto_k.AutoK(APPENDED))


def test_auto_measures_each_new_shape_once(monkeypatch):
  model, inputs = model_and_inputs()
  decoder = generate.Decoder(model)
  measured = []

  def fake_seconds(decoder_, options, batch_size, input_len):
    assert decoder_ is decoder
    measured.append((options.k, batch_size, input_len, options.max_len))
    return {1: 1.0, 2: 1.1}[options.k]
  monkeypatch.setattr(auto_k.timing, 'loop_iteration_seconds', fake_seconds)
  tuning = auto_k.AutoK(np.array([[0, 0, 0, 4]] * 4), candidates=(2,))
  auto = auto_k.AutoDecoder(decoder, tuning)
  with pytest.raises(ValueError, match='no choice made yet'):
    auto.options(1, 6, max_len=8)
  result = auto.decode(inputs[:1], max_len=8)
  # Greedy decoding's loop (k = 1) and k = 2's.
  assert sorted(measured) == [(1, 1, 6, 8), (2, 1, 6, 8)]
  assert tuning.step_costs == {(1, 6, 8): {1: 1.0, 2: 1.1}}
  assert result.block_sizes.shape == (1, 3)
  # The next call of that shape only looks its choice up.
  auto.decode(inputs[:1], max_len=8)
  assert len(measured) == 2


@pytest.mark.parametrize('kwargs,message', [
    (dict(tuning=None), "k='auto' needs tuning"),
    (dict(tuning='tuned'), "k='auto' needs tuning"),
    (dict(criterion=decoding.TopK(2), tuning=auto_k.AutoK(APPENDED)),
     "holds for criterion 'exact', not 'top-k:2'"),
    (dict(criterion='exact', tuning=auto_k.AutoK(APPENDED)),
     'is not a decoding.Criterion'),
])
def test_auto_needs_a_matching_tuning(kwargs, message):
  model, _ = model_and_inputs()
  with pytest.raises(ValueError, match=message):
    auto_k.AutoDecoder(generate.Decoder(model), **kwargs)


# --- Trees as candidates.

# Head 2's right token is its argmax half the time and its runner-up 40%;
# head 3's 50% / 30%; ranks 0 and 1 of each head (t = 2).
RANKS = np.array([[0.5, 0.4], [0.5, 0.3]])


def test_a_trees_blocks_are_its_depths_scaled_by_its_expected_gain():
  tuning = auto_k.AutoK(np.array([[0, 0, 2, 0, 0], [0, 4, 0, 0, 0]]),
                        rank_probabilities=RANKS, tree_sizes=(4,))
  (tree,) = tuning.trees
  # The most probable 3 nodes: (0) .5, (1) .4, (0, 0) .25.
  assert set(tree.paths) == {(0,), (1,), (0, 0)}
  chain = decoding.Tree.chain(2)
  gain = (1 + 0.5 + 0.4 + 0.25) / (1 + 0.5 + 0.25)
  assert tree.expected_block(RANKS) / chain.expected_block(RANKS) == \
      pytest.approx(gain)
  np.testing.assert_allclose(tuning.mean_block(tree),
                             tuning.mean_block(3) * gain)
  # Cheap enough, the tree wins over every k; dear, it does not (the
  # blocks of 2 tokens make k=2 the best chain).
  costs = {1: 1.0, 2: 1.2, 3: 1.3}
  assert tuning.choose_from({**costs, tree: 1.35}, 1) == tree
  assert tuning.choose_from({**costs, tree: 3.0}, 1) == 2


def test_save_and_load_keep_the_trees_and_their_costs(tmp_path):
  tuning = auto_k.AutoK(APPENDED, rank_probabilities=np.ones((3, 2)) / 3,
                        tree_sizes=(5, 7))
  tuning.step_costs[(1, 6, 8)] = {1: 0.5, 4: 0.7, tuning.trees[1]: 0.9}
  tuning.save(tmp_path / 'auto_k.json')
  loaded = auto_k.AutoK.load(tmp_path / 'auto_k.json')
  assert loaded.trees == tuning.trees
  assert loaded.step_costs == tuning.step_costs


def test_rank_probabilities_count_where_the_path_above_can_be_right():
  from bpd_jax import predictions  # pylint: disable=g-import-not-at-top
  # One output [5 6 7 1]; heads 1..3 with top-2 tokens per position.
  outputs = np.array([[5, 6, 7, 1]])
  top = np.zeros((1, 4, 3, 2), int)
  top[0, :, 0] = [[5, 9], [6, 9], [7, 9], [1, 9]]  # Head 1: the outputs.
  top[0, 0, 1:] = [[9, 6], [7, 9]]   # Position 0: head 2 rank 1, head 3 rank 0.
  top[0, 1, 1:] = [[7, 9], [9, 9]]   # Position 1: head 2 rank 0, head 3 miss.
  top[0, 2, 1:] = [[9, 9], [9, 9]]   # Position 2: head 2 miss.
  probabilities = predictions.rank_probabilities(top, outputs,
                                                 np.array([4]))
  # Head 2 at positions 0..2 (position 3 has no token 4): ranks 1, 0, miss.
  np.testing.assert_allclose(probabilities[0], [1 / 3, 1 / 3])
  # Head 3 where head 2 held its token: positions 0 (rank 0) and 1 (miss).
  np.testing.assert_allclose(probabilities[1], [1 / 2, 0])


def test_tune_k_with_trees_and_auto_decoding_with_the_chosen_tree():
  model, inputs = model_and_inputs()
  decoder = generate.Decoder(model)
  tuning = auto_k.tune_k(decoder, inputs, max_len=12, batch_size=3,
                         tree_sizes=(5,), top_t=2)
  assert tuning.rank_probabilities.shape == (2, 2)
  (tree,) = tuning.trees
  assert tree.size == 5
  # Costs that favour the tree: auto decodes with it, exactly.
  tuning.step_costs = {(4, 6, 12): {1: 9.0, 2: 9.0, 3: 9.0, tree: 1.0}}
  result = auto_k.AutoDecoder(decoder, tuning).decode(inputs, max_len=12)
  np.testing.assert_array_equal(result.tokens,
                                decoder.greedy(inputs, max_len=12).tokens)
  assert result.block_sizes.shape[1] == tree.depth + 2
  with pytest.raises(ValueError, match='tree tuning measures exact'):
    auto_k.tune_k(decoder, inputs, max_len=12, tree_sizes=(5,),
                  criterion=decoding.TopK(2))
  with pytest.raises(ValueError, match='tree sizes \\[1\\]'):
    auto_k.tune_k(decoder, inputs, max_len=12, tree_sizes=(1,))


def test_tune_k_refuses_tree_sizes_beyond_the_node_budget_before_decoding():
  # The top 4 of 5 heads make trees of up to 1,365 nodes; the budget is
  # the limit. A stand-in decoder: the check comes before any decode.
  decoder = types.SimpleNamespace(
      config=types.SimpleNamespace(num_proposal_heads=6), mesh=None)
  size = decoding.tree.MAX_NODES + 1
  with pytest.raises(ValueError, match=rf'tree sizes \[{size}\] must be 2 '
                     rf'to {size - 1}: a larger tree exceeds the budget'):
    auto_k.tune_k(decoder, np.zeros((2, 4), np.int32), max_len=8,
                  tree_sizes=(16, size))


def test_tune_k_with_dynamic_trees_measures_them_and_auto_decodes_with_one(
    tmp_path):
  model, inputs = model_and_inputs()
  decoder = generate.Decoder(model)
  tuning = auto_k.tune_k(decoder, inputs, max_len=12, batch_size=3,
                         dynamic_sizes=(6,), every_k=False)
  (tree,) = tuning.dynamic_trees
  assert tree == decoding.DynamicTree(6, 2) and tree.spec == 'dynamic:6'
  counts = tuning.appended_dynamic['dynamic:6']
  assert counts.shape == tuning.appended.shape
  # Measured, not estimated: its calls are the decode's.
  np.testing.assert_array_equal(tuning.calls(tree), counts.sum(axis=1))
  # Costs that favour it: auto decodes with it, exactly.
  tuning.step_costs = {(4, 6, 12): {1: 9.0, 2: 9.0, 3: 9.0, tree: 1.0}}
  result = auto_k.AutoDecoder(decoder, tuning).decode(inputs, max_len=12)
  np.testing.assert_array_equal(result.tokens,
                                decoder.greedy(inputs, max_len=12).tokens)
  tuning.save(tmp_path / 'auto_k.json')
  loaded = auto_k.AutoK.load(tmp_path / 'auto_k.json')
  assert loaded.dynamic_trees == (tree,)
  assert loaded.step_costs == tuning.step_costs
  with pytest.raises(ValueError, match=r"appended_dynamic\['dynamic:6'\] "
                     'must be'):
    auto_k.AutoK(APPENDED, appended_dynamic={'dynamic:6': [[1, 2]]})
