"""Decoding options and refinement specs: their checks name the bad value."""

import numpy as np
import pytest

from bpd_jax.decoding import (DecodeOptions, Exact, Lookup, Refinement,
                              Sampler, TopK, Tree, Typical)


def test_parse_specs():
  r = Refinement.from_spec('ngram:p=4,t=3,w=0.25')
  assert (r.rescorer, r.drafts, r.top_t, r.weight) == ('ngram', 4, 3, 0.25)
  r = Refinement.from_spec('neural:t=4', window=6)
  assert (r.drafts, r.top_t, r.context) == (1, 4, 6)
  assert Refinement.from_spec('none').is_plain


@pytest.mark.parametrize('spec, message', [
    ('bigram:p=2', "rescorer 'bigram' is not one of"),
    ('ngram:q=2', "'q=2' is not one of p=, t=, w=, n="),
    ('ngram:p=two', "p='two' is not an integer"),
    ('ngram:p=2,p=4', 'p= is given twice'),
    ('ngram:w=2', r'weight=2.0 must be a number in \[0, 1\]'),
    ('ngram:w=nan', r'weight=nan must be a number in \[0, 1\]'),
    ('none:p=0', 'drafts=0 must be an integer >= 1'),
])
def test_bad_specs(spec, message):
  with pytest.raises(ValueError, match=message):
    Refinement.from_spec(spec)


@pytest.mark.parametrize('kwargs, message', [
    (dict(max_len=0), 'max_len=0 must be an integer >= 1'),
    (dict(max_len=4, k=5), r'k=5 must be an integer in \[1, 4\]'),
    (dict(max_len=4, k=2, min_block=3), r'min_block=3 must be an integer in '
     r'\[1, k=2\]'),
    (dict(max_len=4, k=2, criterion='exact'), "criterion='exact' is not"),
    (dict(max_len=4, k=2, criterion=TopK(51)), 't=51 exceeds the vocabulary'),
    # Greedy decoding is k=1: its limits are those of every k.
    (dict(max_len=4, min_block=2), r'min_block=2 must be an integer in '
     r'\[1, k=1\]'),
    (dict(max_len=4, k=0), r'k=0 must be an integer in \[1, 4\], the '
     r"model's number of proposal heads \(1: greedy decoding\)"),
    (dict(max_len=4, k=3, min_block=0), r'min_block=0 must be an integer in '
     r'\[1, k=3\]'),
    (dict(max_len=4, k=3, min_block=2,
          refinement=Refinement(drafts=2, top_t=2)),
     'min_block=2: a tree has no one draft to accept unverified'),
    (dict(max_len=4, k=3, refinement=Refinement(drafts=5, top_t=2)),
     r'drafts=5 exceeds the 2\^2 = 4'),
    # Bools are not integers: True would decode one token, k=False greedily.
    (dict(max_len=True), 'max_len=True must be an integer >= 1'),
    (dict(max_len=4, k=False), r'k=False must be an integer in \[1, 4\]'),
    (dict(max_len=4, k=2.0), 'k=2.0 must be an integer'),
    (dict(max_len=4, min_block=True), r'min_block=True must be an integer'),
    (dict(max_len=4, k=2, min_block=True), 'min_block=True must be an '
     'integer'),
    # Drafters that need no training.
    (dict(max_len=4, k=1, lookup=Lookup()), r"k=1: drafter 'lookup' "
     r'proposes k - 1 tokens a call; k must be an integer >= 2'),
    (dict(max_len=4, k=6, lookup=Lookup(heads='fallback')),
     r"k=6 with the heads drafting \(drafter 'lookup:heads=fallback'\) "
     r'must be at most 4'),
    (dict(max_len=4, k=3, lookup=Lookup(), min_block=2),
     "min_block=2: drafter 'lookup' may propose nothing"),
    (dict(max_len=4, k=3, lookup=Lookup(), tree=Tree.from_widths((2,), 2)),
     "drafter 'lookup' takes no tree and no refinement"),
    (dict(max_len=4, k=3, lookup=Lookup(heads='tree'),
          sampler=Sampler(1.0), criterion=Typical(0.3, 0.1)),
     'a tree under sampling is verified by the rejection rule'),
    (dict(max_len=4, k=3, lookup='lookup'), "lookup='lookup' is not a "
     'decoding.Lookup'),
    (dict(max_len=4, k=3, lookup=Lookup(min_ngram=0)),
     'lookup min=0 must be an integer >= 1'),
])
def test_bad_options_are_named(kwargs, message):
  with pytest.raises(ValueError, match=message):
    DecodeOptions(**kwargs).check(num_heads=4, vocab_size=50)


def test_numpy_integers_are_integers():
  options = DecodeOptions(max_len=np.int64(9), k=np.int32(3),
                          min_block=np.int64(2))
  options.check(num_heads=4, vocab_size=50)
  # The same options, and so the same compilation key, as Python ints.
  assert options == DecodeOptions(max_len=9, k=3, min_block=2)
  assert type(options.k) is int and hash(options) == hash(
      DecodeOptions(max_len=9, k=3, min_block=2))


@pytest.mark.parametrize('kwargs, message', [
    (dict(drafts=True), 'drafts=True must be an integer >= 1'),
    (dict(top_t=2.0), 'top_t=2.0 must be an integer >= 1'),
    (dict(weight='0.3'), r"weight='0.3' must be a number in \[0, 1\]"),
    (dict(weight=float('inf')), r'weight=inf must be a number in'),
    (dict(nodes=True), 'nodes=True must be an integer >= 0'),
])
def test_bad_refinement_fields(kwargs, message):
  with pytest.raises(ValueError, match=message):
    Refinement(**kwargs)


def test_from_specs():
  options = DecodeOptions.from_specs(max_len=9, k=3, criterion='top-k:2',
                                     min_block=2, refinement='ngram:t=2')
  assert options == DecodeOptions(
      max_len=9, k=3, criterion=TopK(2), min_block=2,
      refinement=Refinement(top_t=2, rescorer='ngram'))
  assert DecodeOptions.from_specs(max_len=9).criterion == Exact()
  options.check(num_heads=3, vocab_size=50)


def test_drafters_needing_no_training_from_specs():
  options = DecodeOptions.from_specs(max_len=9, k=12, drafter='lookup:min=1')
  assert options.lookup == Lookup(min_ngram=1)
  assert options.proposer == 'lookup' and options.scored == 12
  options.check(num_heads=3, vocab_size=50)  # k is not the heads'.
  tree = DecodeOptions.from_specs(max_len=9, k=3, drafter='ngram:heads=tree')
  assert tree.proposer == 'lookup_tree' and tree.scored == 5
  assert DecodeOptions.from_specs(max_len=9, k=3,
                                  drafter='heads').lookup is None


def test_greedy_is_k1_and_positions():
  assert DecodeOptions(max_len=9).k == 1
  assert DecodeOptions(max_len=9).required_positions(1) == 10
  assert DecodeOptions(max_len=9, k=4).required_positions(3) == 15


def test_a_criterion_at_k1_compiles_as_greedy():
  # Nothing to verify at k = 1: one compilation key for every criterion.
  assert DecodeOptions(max_len=9, criterion=TopK(2)).static() == (
      DecodeOptions(max_len=9).static())
  assert DecodeOptions(max_len=9, k=2, criterion=TopK(2)).static() != (
      DecodeOptions(max_len=9, k=2).static())
