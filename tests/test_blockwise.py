"""Blockwise decoder on the fake model: exact tokens and model-call counts.

Counting convention (see DecodeResult): every model call counts, the first
(prompt) call included. The first call yields one token and the first
proposals; each later call appends 1..k tokens. So m tokens take
1 + ceil((m - 1) / k) calls when every proposal is right, which never
exceeds the paper's m / k + 1 (ceil(m / k) + 1 where k does not divide m),
and m calls (greedy's count) when every
proposal is wrong.
"""

import functools
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from bpd_jax.decoding import blockwise
from bpd_jax.decoding import Distance, Exact, TopK, blockwise_decode
from bpd_jax.decoding import Lookup
from bpd_jax.decoding import Refinement
from bpd_jax.decoding import Tree
from bpd_jax.decoding import DecodeOptions

import fake_model

PROMPT = [[3, 4, 5], [7, 0, 0], [2, 9, 0], [6, 6, 6]]
LENGTHS = [3, 1, 2, 3]
EOS_POSITION = [9, 30, 14, 100]  # Different ends; the last never ends.

CRITERIA = {
    'exact': (Exact(), lambda p, best, runner_up: p == best),
    'top2': (TopK(2), lambda p, best, runner_up: p in (best, runner_up)),
    'distance1': (Distance(1.0), lambda p, best, runner_up: abs(p - best) <= 1),
}


def decode(mode, k, max_len, criterion=Exact(), min_block=1,
           prompt=PROMPT, lengths=LENGTHS, eos_position=EOS_POSITION,
           refinement=None, rescore=None, fns=None, trace=False, tree=None,
           stop_ids=(), pad_id=fake_model.PAD):
  prompt = jnp.asarray(prompt, jnp.int32)
  options = DecodeOptions(max_len=max_len, k=k, criterion=criterion,
                          min_block=min_block, refinement=refinement,
                          tree=tree)
  cache = fake_model.make_cache(
      prompt.shape[0], options.cache_positions(prompt.shape[1]),
      eos_position)
  run = functools.partial(
      blockwise_decode, fns or fake_model.make_fns(mode, k), options=options,
      end_ids=(fake_model.EOS, *stop_ids), pad_id=pad_id, rescore=rescore)
  args = (cache, prompt, jnp.asarray(lengths, jnp.int32))
  return jax.make_jaxpr(run)(*args) if trace else jax.jit(run)(*args)


def second_best_fns(k):
  """Heads that rank the right token second (their argmax is always wrong)."""
  fns = fake_model.make_fns('oracle', k)

  def proposal_logits(*args):
    logits, cache = fns.proposal_logits(*args)
    right = jnp.argmax(logits, axis=-1)
    return (jax.nn.one_hot(right, fake_model.VOCAB) + 2.0 * jax.nn.one_hot(
        fake_model.runner_up(right), fake_model.VOCAB)), cache
  return fns._replace(proposal_logits=proposal_logits)


def greedy_reference(i, max_len):
  """Plain-Python greedy output of example i of the batch."""
  return fake_model.reference_greedy(PROMPT[i][:LENGTHS[i]], EOS_POSITION[i],
                                     max_len)


def check_against_reference(result, mode, k, max_len, accepts, min_block=1):
  for i, (prompt, length) in enumerate(zip(PROMPT, LENGTHS)):
    tokens, calls, appended = fake_model.reference_blockwise(
        prompt[:length], EOS_POSITION[i], max_len, k, mode, accepts,
        min_block)
    n = len(tokens)
    np.testing.assert_array_equal(result.tokens[i, :n], tokens)
    assert (result.tokens[i, n:] == fake_model.PAD).all()
    assert result.lengths[i] == n
    assert result.model_calls[i] == calls
    np.testing.assert_array_equal(
        result.block_sizes[i], np.bincount(appended, minlength=k + 1))


@pytest.mark.parametrize('k', [1, 2, 3, 5, 8])
def test_oracle_heads_take_one_call_per_block(k):
  max_len = 40
  result = decode('oracle', k, max_len)
  for i in range(len(PROMPT)):
    expected = greedy_reference(i, max_len)
    m = len(expected)
    np.testing.assert_array_equal(result.tokens[i, :m], expected)
    assert result.lengths[i] == m
    assert result.model_calls[i] == 1 + math.ceil((m - 1) / k)
    # The paper's m / k + 1, for m not a multiple of k too.
    assert result.model_calls[i] <= math.ceil(m / k) + 1


@pytest.mark.parametrize('k', [2, 4, 8])
def test_wrong_heads_cost_no_more_calls_than_greedy(k):
  max_len = 25
  result = decode('wrong', k, max_len)
  for i in range(len(PROMPT)):
    expected = greedy_reference(i, max_len)
    np.testing.assert_array_equal(result.tokens[i, :len(expected)], expected)
    assert result.model_calls[i] == len(expected)  # Greedy's count.
    assert result.block_sizes[i, 1] == len(expected)


@pytest.mark.parametrize('k,right', [(4, 1), (6, 3), (8, 2)])
@pytest.mark.parametrize('max_len', [3, 17, 40])
def test_partly_right_heads_match_reference(k, right, max_len):
  mode = ('right_first', right)
  result = decode(mode, k, max_len)
  check_against_reference(result, mode, k, max_len, CRITERIA['exact'][1])
  # Exact verification: the greedy output whatever the heads say.
  for i in range(len(PROMPT)):
    expected = greedy_reference(i, max_len)
    np.testing.assert_array_equal(result.tokens[i, :len(expected)], expected)
  # Heads 2..right+1 are right: right + 1 tokens a call, until the end.
  assert (result.block_sizes[:, right + 2:] == 0).all()


@pytest.mark.parametrize('name', sorted(CRITERIA))
@pytest.mark.parametrize('min_block', [1, 2, 3])
def test_criteria_and_min_block_match_reference(name, min_block):
  criterion, accepts = CRITERIA[name]
  k, max_len = 4, 30
  result = decode('wrong', k, max_len, criterion=criterion,
                  min_block=min_block)
  check_against_reference(result, 'wrong', k, max_len, accepts, min_block)


def test_approximate_criteria_accept_runner_up_proposals():
  # 'wrong' heads propose the scoring model's runner-up: within its top 2,
  # and within distance 13 of the best (1 or 13 apart, ids wrap around).
  # So every call but the first (and a last one cut by max_len) accepts at
  # least its first proposal.
  k = 4
  for criterion in (TopK(2), Distance(13.0)):
    result = decode('wrong', k, 40, criterion=criterion,
                    eos_position=[1000] * 4)
    assert (result.block_sizes[:, 1] <= 2).all()
    assert (result.block_sizes[:, 2:].sum(1) >= result.model_calls - 2).all()
  # Exact verification, TopK(1) and Distance(0) accept none of them.
  for criterion in (Exact(), TopK(1), Distance(0.0)):
    result = decode('wrong', k, 40, criterion=criterion)
    assert (result.block_sizes[:, 2:] == 0).all()


def test_min_block_appends_at_least_l_tokens_per_call():
  k, min_block = 5, 3
  # 31 = 1 + 10 * 3: no call is cut short by max_len.
  result = decode('wrong', k, 31, min_block=min_block,
                  eos_position=[1000] * 4)
  assert (result.block_sizes[:, 1] == 1).all()  # The first call.
  assert (result.block_sizes[:, 2:min_block] == 0).all()


@pytest.mark.parametrize('max_len', [1, 5, 12, 20])
def test_k1_is_plain_python_greedy_per_example(max_len):
  # Greedy decoding is the loop at k = 1: one call a token, no proposals.
  result = decode('oracle', 1, max_len)
  for i in range(len(PROMPT)):
    expected = greedy_reference(i, max_len)
    n = len(expected)
    np.testing.assert_array_equal(result.tokens[i, :n], expected)
    assert (result.tokens[i, n:] == fake_model.PAD).all()
    assert result.lengths[i] == n
    assert result.model_calls[i] == n  # One call per token.
    np.testing.assert_array_equal(result.block_sizes[i], [0, n])


def test_greedy_keeps_eos_and_ends_the_example():
  # Tokens at positions 2, 3; eos at 4.
  result = decode('oracle', 1, 10, prompt=[[3, 4]], lengths=[2],
                  eos_position=[4])
  assert result.lengths[0] == 3
  assert result.tokens[0, 2] == fake_model.EOS
  assert (result.tokens[0, 3:] == fake_model.PAD).all()


@pytest.mark.parametrize('mode, k, tree', [
    ('oracle', 1, None), ('oracle', 4, None), (('right_first', 1), 3, None),
    (('right_first', 1), 4, Tree.from_widths((2, 1, 2), 3))])
def test_stop_ids_end_an_example_as_eos_does_padded_with_minus_one(
    mode, k, tree):
  # No vocabulary id pads (-1), and 5 and 9 end an example as eos does:
  # each output is greedy's up to its first end id (kept), -1 after it.
  max_len, stops = 40, (5, 9)
  prompt = np.where(np.arange(3) < np.array(LENGTHS)[:, None], PROMPT, -1)
  result = decode(mode, k, max_len, prompt=prompt, stop_ids=stops,
                  pad_id=-1, tree=tree)
  cut = 0
  for i in range(len(PROMPT)):
    expected = greedy_reference(i, max_len)
    ends = [j for j, token in enumerate(expected) if token in stops]
    if ends:
      expected, cut = expected[:ends[0] + 1], cut + 1
    n = len(expected)
    np.testing.assert_array_equal(result.tokens[i, :n], expected)
    assert (result.tokens[i, n:] == -1).all()
    assert result.lengths[i] == n
    if mode == 'oracle':
      assert result.model_calls[i] == 1 + math.ceil((n - 1) / k)
  assert cut >= 2  # Stop ids ended examples that eos ends later.


def test_batch_equals_each_example_alone():
  k, max_len = 4, 30
  mode = ('right_first', 2)
  batch = decode(mode, k, max_len)
  for i in range(len(PROMPT)):
    alone = decode(mode, k, max_len, prompt=PROMPT[i:i + 1],
                   lengths=LENGTHS[i:i + 1],
                   eos_position=EOS_POSITION[i:i + 1])
    np.testing.assert_array_equal(batch.tokens[i], alone.tokens[0])
    assert batch.model_calls[i] == alone.model_calls[0]


def test_verify_takes_the_longest_acceptable_prefix():
  # One example, 3 proposals; the logits favour 5 at every position.
  logits = jnp.broadcast_to(jax.nn.one_hot(5, 8), (3, 3, 8))
  proposals = jnp.array([[5, 2, 5], [5, 5, 2], [2, 5, 5]])
  np.testing.assert_array_equal(
      blockwise.verify(Exact(), proposals, logits, 0), [1, 2, 0])
  np.testing.assert_array_equal(
      blockwise.verify(Exact(), proposals, logits, 3), [3, 3, 3])




# --- Draft refinement: several drafts per example, verified in one call.


@pytest.mark.parametrize('k, max_len', [(2, 40), (3, 17), (4, 3), (4, 40)])
def test_all_lattice_drafts_verified_pick_the_longest_accepted(k, max_len):
  # Plain drafts are all wrong; the top-2 lattice holds the right draft, and
  # with every one of its 2^(k-1) paths verified, that one wins each call:
  # the oracle heads' call counts, and the greedy output.
  fns = second_best_fns(k)
  plain = decode(None, k, max_len, fns=fns)
  refined = decode(None, k, max_len, fns=fns,
                   refinement=Refinement(drafts=2 ** (k - 1), top_t=2))
  oracle = decode('oracle', k, max_len)
  for i in range(len(PROMPT)):
    expected = greedy_reference(i, max_len)
    m = len(expected)
    np.testing.assert_array_equal(refined.tokens[i, :m], expected)
    assert (refined.tokens[i, m:] == fake_model.PAD).all()
    assert plain.model_calls[i] == m  # Every plain draft rejected.
  np.testing.assert_array_equal(refined.model_calls, oracle.model_calls)
  np.testing.assert_array_equal(refined.block_sizes, oracle.block_sizes)


def test_fewer_drafts_than_paths_stay_exact():
  # Two of the eight paths per call: the heads' best (all wrong) and one
  # of the runners-up (one proposal right): still the greedy output, in
  # fewer calls than greedy's but more than the oracle's.
  k = 4
  result = decode(None, k, 30, fns=second_best_fns(k),
                  refinement=Refinement(drafts=2, top_t=2))
  oracle = decode('oracle', k, 30)
  for i in range(len(PROMPT)):
    expected = greedy_reference(i, 30)
    np.testing.assert_array_equal(result.tokens[i, :len(expected)], expected)
    assert oracle.model_calls[i] < result.model_calls[i] < len(expected)


@pytest.mark.parametrize('mode', ['oracle', 'wrong', ('right_first', 2)])
def test_one_draft_through_the_refined_loop_equals_plain(mode):
  # weight 0: the rescorer is ignored, so the one draft is the heads'
  # argmax; the refined loop (history, lattice, verification over a
  # candidate axis) must then decode exactly as the plain one.
  k, max_len = 5, 30
  refinement = Refinement(drafts=1, top_t=3, rescorer='ngram', weight=0.0,
                          context=2)
  rescore = lambda context, word: jnp.zeros(word.shape)
  plain = decode(mode, k, max_len)
  refined = decode(mode, k, max_len, refinement=refinement, rescore=rescore)
  for field in ('tokens', 'lengths', 'model_calls', 'block_sizes'):
    np.testing.assert_array_equal(getattr(refined, field),
                                  getattr(plain, field))


def test_refinement_that_proposes_plain_drafts_is_the_plain_program():
  plain = decode('oracle', 4, 20, trace=True)
  for refinement in (Refinement(), Refinement(top_t=4),
                     Refinement(drafts=1, top_t=4, rescorer='none')):
    assert refinement.is_plain
    assert str(decode('oracle', 4, 20, refinement=refinement,
                      trace=True)) == str(plain)


# --- Static trees of the heads' candidates.


@pytest.mark.parametrize('k, max_len', [(2, 40), (4, 3), (4, 40)])
def test_a_tree_holding_the_right_draft_decodes_as_the_oracle(k, max_len):
  # The heads rank the right token second: a tree of every top-2
  # combination holds the right draft each call, so every call accepts
  # as the oracle's do, and the output is greedy's.
  fns = second_best_fns(k)
  result = decode(None, k, max_len, fns=fns,
                  tree=Tree.from_widths((2,) * (k - 1), k - 1))
  oracle = decode('oracle', k, max_len)
  for i in range(len(PROMPT)):
    expected = greedy_reference(i, max_len)
    np.testing.assert_array_equal(result.tokens[i, :len(expected)],
                                  expected)
  np.testing.assert_array_equal(result.model_calls, oracle.model_calls)
  np.testing.assert_array_equal(result.block_sizes, oracle.block_sizes)


# An approximate criterion over a tree: slow here; by default per call in
# tests/test_tree.py (test_tree_accepts_what_its_best_path_accepts_alone).
@pytest.mark.parametrize('name', [
    'exact', pytest.param('top2', marks=pytest.mark.slow)])
def test_a_tree_with_the_argmax_path_accepts_at_least_the_chain(name):
  # The argmax chain is one of the tree's paths: calls never exceed the
  # plain draft's, and the output is what the criterion gives.
  criterion, _ = CRITERIA[name]
  k, max_len = 4, 30
  for mode in ('oracle', 'wrong', ('right_first', 1)):
    plain = decode(mode, k, max_len, criterion=criterion)
    treed = decode(mode, k, max_len, criterion=criterion,
                   tree=Tree.from_widths((2, 1, 2), 3))
    if name == 'exact':
      np.testing.assert_array_equal(treed.tokens, plain.tokens)
    assert (treed.model_calls <= plain.model_calls).all()
    if mode == 'oracle':
      np.testing.assert_array_equal(treed.model_calls, plain.model_calls)


def test_a_chain_tree_is_the_plain_program():
  plain = decode('oracle', 4, 20, trace=True)
  assert str(decode('oracle', 4, 20, tree=Tree.chain(3), trace=True)) == \
      str(plain)


def test_a_lookup_searches_the_text_it_is_given_before_the_output():
  # An encoder-decoder's source, searched before its prompt (bos) and
  # output (`generate` passes it): here each example's prompt then the
  # very output it will write, so the lookup finds the output's continuation
  # from the first call, where searching the prompt alone finds it only
  # once the output repeats itself.
  k, max_len = 4, 20
  options = DecodeOptions(max_len=max_len, k=k,
                          lookup=Lookup(min_ngram=1, max_ngram=2))
  texts = [PROMPT[i][:LENGTHS[i]] + greedy_reference(i, max_len)
           for i in range(len(PROMPT))]
  width = max(map(len, texts))
  searched = (jnp.asarray([t + [fake_model.PAD] * (width - len(t))
                           for t in texts], jnp.int32),
              jnp.asarray([len(t) for t in texts], jnp.int32))
  prompt = jnp.asarray(PROMPT, jnp.int32)
  calls = {}
  for name, text in (('prompt', None), ('searched', searched)):
    cache = fake_model.make_cache(
        prompt.shape[0], options.cache_positions(prompt.shape[1]),
        EOS_POSITION)
    result = jax.jit(functools.partial(
        blockwise_decode, fake_model.make_fns('wrong', k), options=options,
        end_ids=(fake_model.EOS,), pad_id=fake_model.PAD, searched=text))(
            cache, prompt, jnp.asarray(LENGTHS, jnp.int32))
    for i in range(len(PROMPT)):
      expected = greedy_reference(i, max_len)
      np.testing.assert_array_equal(result.tokens[i, :len(expected)],
                                    expected)
    calls[name] = np.asarray(result.model_calls)
  # Every proposal after the first call is right: ceil((m - 1) / k) + 1.
  lengths = [len(greedy_reference(i, max_len)) for i in range(len(PROMPT))]
  np.testing.assert_array_equal(
      calls['searched'], [1 + math.ceil((m - 1) / k) for m in lengths])
  assert (calls['searched'] < calls['prompt']).all(), calls
