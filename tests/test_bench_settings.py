"""The bench's sweep of settings, named and ordered; greedy decoding first."""

import numpy as np
import pytest

from bpd_jax import auto_k
from bpd_jax.bench import settings
from bpd_jax.infra import errors
from bpd_jax.rescorers import ngram


def test_sweep_order_and_combinations():
  tuning = auto_k.AutoK(np.array([[0, 1, 1]]))
  sweep = settings.sweep([2, 4], ['exact', 'top-k:2'], [1, 3], tuning=tuning,
                         max_len=10)
  assert [s.name for s in sweep] == [
      'greedy', 'k=2', 'k=4', 'k=4 l=3', 'k=2 top-k:2', 'k=4 top-k:2',
      'k=4 top-k:2 l=3', 'auto']
  assert [s.kind for s in sweep[:2]] == ['greedy', 'blockwise']
  assert sweep[-1].kind == 'auto' and sweep[-1].tuning is tuning
  # No tuning, no auto setting; a k of 1 is the greedy setting already.
  assert [s.name for s in settings.sweep([1, 2], max_len=10)] == [
      'greedy', 'k=2']
  sampled = settings.sweep([2, 4], ['exact', 'top-k:2', 'typical:0.3,0.09'],
                           samplers=['temperature=0.7'], max_len=10)
  assert [(s.name, s.kind) for s in sampled if s.sampler] == [
      ('ancestral temperature=0.7', 'ancestral'),
      ('k=2 temperature=0.7', 'blockwise'),
      ('k=4 temperature=0.7', 'blockwise'),
      ('k=2 typical:0.3,0.09 temperature=0.7', 'blockwise'),
      ('k=4 typical:0.3,0.09 temperature=0.7', 'blockwise')]
  assert [s.name for s in settings.sweep([2, 3], trees=['2'],
                                         max_len=10)] == [
      'greedy', 'k=2', 'k=3', 'k=2 tree=2', 'k=3 tree=2']
  # A dynamic tree at every k; every tree under each sampler too.
  assert [s.name for s in settings.sweep(
      [2, 3], trees=['2', 'dynamic:5,top=4'], samplers=['temperature=1.0'],
      max_len=10)] == [
          'greedy', 'k=2', 'k=3', 'k=2 tree=2', 'k=3 tree=2',
          'k=2 tree=dynamic:5,top=4', 'k=3 tree=dynamic:5,top=4',
          'ancestral temperature=1', 'k=2 temperature=1',
          'k=3 temperature=1', 'k=2 tree=2 temperature=1',
          'k=3 tree=2 temperature=1', 'k=2 tree=dynamic:5,top=4 temperature=1',
          'k=3 tree=dynamic:5,top=4 temperature=1']
  assert [s.name for s in settings.sweep(
      [2, 4], drafters=['lookup', 'ngram:heads=tree'], max_len=10)] == [
          'greedy', 'k=2', 'k=4', 'k=2 lookup', 'k=4 lookup',
          'k=2 ngram:heads=tree', 'k=4 ngram:heads=tree']


def test_a_tunings_trees_are_rows_at_their_depth():
  # Head 2's right token is rank 0 half the time, rank 1 40%; head 3's
  # 50% / 30%: the best 4-node tree is (0), (1), (0, 0), depth 2.
  tuning = auto_k.AutoK(np.array([[0, 1, 1]]),
                        rank_probabilities=np.array([[.5, .4], [.5, .3]]),
                        tree_sizes=(4, 3))
  sweep = settings.sweep([2, 3], tuning=tuning, max_len=10)
  assert [s.name for s in sweep] == [
      'greedy', 'k=2', 'k=3', 'k=3 tree:4', 'k=2 tree:3', 'auto']
  options = sweep[3].options
  assert options.k == 3 and options.tree == tuning.trees[0]
  assert set(options.tree.paths) == {(0,), (1,), (0, 0)}
  assert sweep[4].options.tree.paths == ((0,), (1,))


def test_greedy_is_k1():
  greedy = settings.sweep([2], max_len=10)[0]
  assert greedy.options.k == 1 and greedy.kind == 'greedy'
  assert greedy.options.max_len == 10


@pytest.mark.parametrize('kwargs,message', [
    (dict(criteria=['top3']), "criterion 'top3'"),
    (dict(samplers=['warmth=2']), "'warmth=2' is not one of temperature="),
    (dict(trees=['2,x']), "'2,x'"),
    (dict(trees=['dynamic:64']), "tree 'dynamic:64': no k of"),
    (dict(trees=['dynamic:x']), "'dynamic:x' is not"),
    (dict(drafters=['lookup:min=9']), r'max=3 must be an integer in \[min=9'),
])
def test_sweep_refuses_a_bad_spec(kwargs, message):
  with pytest.raises(ValueError, match=message):
    settings.sweep([2], max_len=10, **kwargs)


def test_an_ngram_model_of_another_vocabulary_is_refused_naming_it(tmp_path):
  path = str(tmp_path / 'ngram.npz')
  ngram.build([[5, 6, 7]], order=2, vocab_size=50, bos_id=2,
              eos_id=1).save(path)
  plan = settings.Plan(max_len=8, ks=[2], criteria=['exact'], min_blocks=[1],
                       samplers=[], trees=[], batch_sizes=[1], tree_sizes=[],
                       examples=1, repeats=1, calibration_examples=0,
                       output_dir=None, ngram_path=path)
  assert plan.ngram(50).vocab_size == 50
  with pytest.raises(errors.DataError, match=rf'^--ngram={path}: an n-gram '
                     r'model of a vocabulary of 50 ids, the model decodes '
                     r'473'):
    plan.ngram(473)
