"""Drafts that need no training: the prompt lookup's match search, the
n-gram drafter's continuation, their specs, and a call with nothing
proposed scoring one position."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from bpd_jax.decoding import lookup
from bpd_jax.decoding import steps
from bpd_jax.decoding.types import DecodingFns

NONE = lookup.NO_PROPOSAL


def match(rows, m, max_ngram=3, min_ngram=1):
  """match_draft over right-padded rows of token lists."""
  width = max(map(len, rows))
  tokens = np.full((len(rows), width), NONE)
  for i, row in enumerate(rows):
    tokens[i, :len(row)] = row
  proposals, n = lookup.match_draft(jnp.asarray(tokens),
                                    jnp.asarray([len(r) for r in rows]), m,
                                    max_ngram, min_ngram)
  return np.asarray(proposals).tolist(), np.asarray(n).tolist()


def test_the_longest_latest_match_proposes_what_followed_it():
  # 'b c' occurs twice before the end; the latest (followed by 7 8 9)
  # wins over the first (followed by 4), and the longer match 'a b c'
  # (followed by 5 6) over both.
  assert match([[1, 2, 3, 4, 1, 2, 3, 7, 8, 9, 2, 3]], 3) == (
      [[7, 8, 9]], [2])
  assert match([[1, 2, 3, 5, 6, 0, 2, 3, 9, 1, 2, 3]], 2) == ([[5, 6]],
                                                                [3])


def test_nothing_matched_proposes_nothing():
  proposals, n = match([[1, 2, 3, 4], [5]], 3, min_ngram=1)
  assert proposals == [[NONE] * 3] * 2 and n == [0, 0]
  # A bigram is wanted: the repeated unigram is not enough.
  assert match([[4, 1, 5, 1]], 2, min_ngram=2) == ([[NONE, NONE]], [0])


def test_a_short_continuation_repeats_as_a_loop():
  # '7 7' last occurred one token back: the output repeats with period 1.
  assert match([[3, 7, 7, 7]], 4, max_ngram=2) == ([[7, 7, 7, 7]], [2])
  # Period 2: 'x y x y' proposes 'x y x'.
  assert match([[5, 6, 5, 6]], 3, max_ngram=2) == ([[5, 6, 5]], [2])


def test_each_example_searches_its_own_history():
  proposals, n = match([[1, 2, 9, 1, 2], [4, 4, 8, 3, 4]], 2, max_ngram=2)
  assert proposals == [[9, 1], [8, 3]] and n == [2, 1]


def test_history_joins_prompt_and_output_at_each_examples_offset():
  prompt = jnp.asarray([[1, 2, 0], [3, 0, 0]])
  tokens = jnp.asarray([[5, 6, 0, 0], [7, 0, 0, 0]])
  joined = lookup.history(prompt, jnp.asarray([2, 1]), tokens,
                          jnp.asarray([2, 1]))
  assert np.asarray(joined).tolist() == [
      [1, 2, 5, 6, NONE, NONE, NONE], [3, 7] + [NONE] * 5]


def test_ngram_draft_follows_the_model_while_its_context_is_long_enough():
  # A toy model: the next token is the last plus one; it has seen a
  # context of 2 tokens unless the last token is 5 (then 0).
  drafter = lookup.NgramDrafter(
      lambda context: (context[:, -1] + 1,
                       jnp.where(context[:, -1] == 5, 0, 2)), 2, 1)
  history = jnp.asarray([[9, 2, 3], [9, 9, 9]])
  proposals, found = lookup.ngram_draft(drafter, history,
                                        jnp.asarray([3, 1]), 4, 2)
  assert np.asarray(proposals).tolist() == [[4, 5, NONE, NONE],
                                            [10, 11, 12, 13]]
  assert np.asarray(found).tolist() == [2, 2]


@pytest.mark.parametrize('spec,expected', [
    ('lookup', lookup.Lookup()),
    ('lookup:max=4,min=1,heads=tree', lookup.Lookup('lookup', 4, 1, 'tree')),
    ('ngram:min=3,heads=fallback', lookup.Lookup('ngram', 3, 3, 'fallback')),
])
def test_specs_round_trip(spec, expected):
  assert lookup.Lookup.from_spec(spec) == expected
  assert lookup.Lookup.from_spec(expected.spec) == expected
  assert lookup.parse(spec) == expected and lookup.parse('heads') is None


@pytest.mark.parametrize('spec,message', [
    ('lookups', "is one of ('lookup', 'ngram')"),
    ('lookup:n=2', "'n=2' is not one of max=, min=, heads="),
    ('lookup:max=x', "max='x' is not an integer"),
    ('lookup:min=0', 'min=0 must be an integer >= 1'),
    ('lookup:max=2,min=3', 'max=2 must be an integer in [min=3, 16]'),
    ('lookup:heads=both', "heads='both' is not one of"),
    ('lookup:max=3,max=4', "drafter 'lookup:max=3,max=4': max= is given "
     'twice'),
    (None, "drafter None is not a spec string like 'lookup:"),
])
def test_bad_specs_name_the_value(spec, message):
  with pytest.raises(ValueError) as error:
    lookup.Lookup.from_spec(spec)
  assert message in str(error.value)


def test_a_call_with_nothing_proposed_scores_one_position():
  """The cache of this fake model counts the positions scored."""
  fns = DecodingFns(
      extend=lambda cache, tokens, start: (
          jax.nn.one_hot(tokens, 4), cache + tokens.shape[1]),
      next_token_logits=lambda features: features)
  block = jnp.asarray([[1, NONE, NONE], [2, 3, NONE]])
  start = jnp.zeros((2,), jnp.int32)
  logits, scored = steps.scored_logits(fns, 0, block, start,
                                       jnp.asarray([True, True]))
  assert scored == 3 and logits.shape == (2, 3, 4)
  # The second example has finished: its proposal does not count.
  logits, scored = steps.scored_logits(fns, 0, block, start,
                                       jnp.asarray([True, False]))
  assert scored == 1 and logits.shape == (2, 3, 4)
  np.testing.assert_array_equal(logits[:, 2], jax.nn.one_hot([1, 2], 4))
