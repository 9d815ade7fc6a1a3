"""Decoder specs: names, kinds, the options they decode with, references."""

import ml_collections
import numpy as np
import pytest

from bpd_jax import auto_k
from bpd_jax import decoding
from bpd_jax.evaluation import spec as spec_lib
from bpd_jax.evaluation.spec import AutoSpec, DecoderSpec


def test_a_spec_is_a_name_and_its_options():
  greedy = DecoderSpec.of(5)
  assert (greedy.name, greedy.kind, greedy.max_len) == ('greedy', 'greedy', 5)
  assert greedy.options == decoding.DecodeOptions(max_len=5, k=1)
  loose = DecoderSpec.of(5, 4, 'top-k:2', 2)
  assert loose.name == 'blockwise k=4 top-k:2 l=2'
  assert loose.kind == 'blockwise'
  assert loose.options == decoding.DecodeOptions(
      max_len=5, k=4, criterion=decoding.TopK(2), min_block=2)
  assert (loose.k, loose.criterion, loose.min_block, loose.sampler) == (
      4, 'top-k:2', 2, '')
  ancestral = DecoderSpec.of(5, sampler='temperature=0.7')
  assert (ancestral.name, ancestral.kind) == ('ancestral temperature=0.7',
                                              'ancestral')
  assert ancestral.options.sampler == decoding.Sampler(0.7)
  refined = DecoderSpec.of(5, 3, refinement_spec='none:p=2')
  assert refined.name == 'blockwise k=3 none:p=2'
  assert refined.refinement == decoding.Refinement.from_spec('none:p=2')
  assert DecoderSpec.of(5, 2, name='k=2').name == 'k=2'
  # Built from options directly: the same spec.
  assert DecoderSpec(loose.options) == loose
  with pytest.raises(ValueError, match='is not a decoding.DecodeOptions'):
    DecoderSpec(4)


def test_a_tree_as_widths_or_as_a_tree():
  widths = DecoderSpec.of(9, 4, tree='2,2')
  assert widths.name == 'blockwise k=4 tree=2,2'
  assert widths.options.tree == decoding.Tree.from_widths((2, 2), 3)
  tree = decoding.Tree(((0,), (1,), (0, 0)))
  given = DecoderSpec.of(9, 3, tree=tree)
  assert given.name == 'blockwise k=3 tree:4'
  assert given.options.tree == tree and given.options.k == 3
  with pytest.raises(ValueError, match='depth 2 .* k must be 3, not 5'):
    DecoderSpec.of(9, 5, tree=tree).options.check(8, 100)


def test_a_dynamic_tree_as_a_tuned_candidate():
  # The bench's rows of k='auto''s candidates (--dynamic_sizes) pass the
  # tuned DynamicTree itself, as they pass a Tree.
  dynamic = decoding.DynamicTree(8, 3)
  spec = DecoderSpec.of(16, 4, tree=dynamic)
  assert spec.options.tree == dynamic
  assert spec.options == DecoderSpec.of(16, 4, tree='dynamic:8').options


def test_auto_decodes_with_its_tunings_criterion():
  auto = AutoSpec(auto_k.AutoK(np.array([[0, 1, 1]]), 'top-k:2'), 7)
  assert (auto.name, auto.kind, auto.criterion, auto.sampler) == (
      'auto', 'auto', 'top-k:2', '')
  # What it decoded a shape with: what its tuning chose there.
  auto.tuning.step_costs[(3, 5, 7)] = {1: 1.0, 2: 0.1}
  auto.tuning.choose((3, 5, 7), measure=None)
  assert auto.decoded(3, 5) == decoding.DecodeOptions(
      max_len=7, k=2, criterion=decoding.TopK(2))


def test_references():
  greedy, blockwise = DecoderSpec.of(8), DecoderSpec.of(8, 4)
  ancestral = DecoderSpec.of(8, sampler='temperature=0.7')
  sampled = DecoderSpec.of(8, 4, sampler='temperature=0.7')
  specs = [greedy, blockwise, ancestral, sampled]
  assert blockwise.reference(specs) is greedy
  assert sampled.reference(specs) is ancestral
  assert AutoSpec(auto_k.AutoK(np.array([[0, 1]])), 8).reference(specs) is (
      greedy)


def test_decoders_from_config_skip_a_greedy_k():
  config = ml_collections.ConfigDict(dict(
      max_len=6, ks=(1, 4), criteria=('exact', 'typical:0.3,0.09'),
      min_block=1, samplers=('temperature=0.7',),
      drafters=('lookup:heads=tree',), trees=('2', 'dynamic:4,top=2')))
  specs = spec_lib.decoders_from_config(config)
  # Every tree under each sampler too, a dynamic one included.
  assert [s.name for s in specs] == [
      'greedy', 'blockwise k=4', 'blockwise k=4 typical:0.3,0.09',
      'blockwise k=4 lookup:heads=tree', 'blockwise k=4 tree=2',
      'blockwise k=4 tree=dynamic:4,top=2',
      'ancestral temperature=0.7', 'blockwise k=4 temperature=0.7',
      'blockwise k=4 typical:0.3,0.09 temperature=0.7',
      'blockwise k=4 tree=2 temperature=0.7',
      'blockwise k=4 tree=dynamic:4,top=2 temperature=0.7']
  assert {s.max_len for s in specs} == {6}
