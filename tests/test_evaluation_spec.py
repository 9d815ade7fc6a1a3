"""Decoder specs: names, kinds, the options they decode with, references."""

import ml_collections
import numpy as np
import pytest

from bpd_jax import auto_k
from bpd_jax import decoding
from bpd_jax.evaluation import spec as spec_lib
from bpd_jax.evaluation.spec import AutoSpec, DecoderSpec


def test_spec_names_and_kinds():
  assert DecoderSpec().name == 'greedy' and DecoderSpec().kind == 'greedy'
  assert DecoderSpec().options(5) == decoding.DecodeOptions(max_len=5, k=1)
  assert DecoderSpec(4, 'top-k:2', 2).name == 'blockwise k=4 top-k:2 l=2'
  assert DecoderSpec(4, 'top-k:2', 2).kind == 'blockwise'
  ancestral = DecoderSpec(sampler='temperature=0.7')
  assert (ancestral.name, ancestral.kind) == ('ancestral temperature=0.7',
                                              'ancestral')
  assert DecoderSpec(3, refinement_spec='none:p=2').name == (
      'blockwise k=3 none:p=2')
  assert DecoderSpec(2, name='k=2').name == 'k=2'


def test_a_tree_as_widths_or_as_a_tree():
  widths = DecoderSpec(4, tree='2,2')
  assert widths.name == 'blockwise k=4 tree=2,2'
  assert widths.options(9).tree == decoding.Tree.from_widths((2, 2), 3)
  tree = decoding.Tree(((0,), (1,), (0, 0)))
  given = DecoderSpec(3, tree=tree)
  assert given.name == 'blockwise k=3 tree:4'
  assert given.options(9).tree == tree and given.options(9).k == 3
  with pytest.raises(ValueError, match='depth 2 .* k must be 3, not 5'):
    DecoderSpec(5, tree=tree).options(9).check(8, 100)


def test_auto_decodes_with_its_tunings_criterion():
  auto = AutoSpec(auto_k.AutoK(np.array([[0, 1, 1]]), 'top-k:2'))
  assert (auto.name, auto.kind, auto.criterion, auto.sampler) == (
      'auto', 'auto', 'top-k:2', '')
  # What it decoded a shape with: what its tuning chose there.
  auto.tuning.step_costs[(3, 5, 7)] = {1: 1.0, 2: 0.1}
  auto.tuning.choose((3, 5, 7), measure=None)
  assert auto.decoded(7, 3, 5) == decoding.DecodeOptions(
      max_len=7, k=2, criterion=decoding.TopK(2))


def test_references():
  greedy, blockwise = DecoderSpec(), DecoderSpec(4)
  ancestral = DecoderSpec(sampler='temperature=0.7')
  sampled = DecoderSpec(4, sampler='temperature=0.7')
  specs = [greedy, blockwise, ancestral, sampled]
  assert blockwise.reference(specs) is greedy
  assert sampled.reference(specs) is ancestral
  assert AutoSpec(auto_k.AutoK(np.array([[0, 1]]))).reference(specs) is (
      greedy)


def test_decoders_from_config_skip_a_greedy_k():
  config = ml_collections.ConfigDict(dict(
      ks=(1, 4), criteria=('exact', 'typical:0.3,0.09'), min_block=1,
      samplers=('temperature=0.7',)))
  assert [s.name for s in spec_lib.decoders_from_config(config)] == [
      'greedy', 'blockwise k=4', 'blockwise k=4 typical:0.3,0.09',
      'ancestral temperature=0.7', 'blockwise k=4 temperature=0.7',
      'blockwise k=4 typical:0.3,0.09 temperature=0.7']
