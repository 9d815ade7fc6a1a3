"""configs/celeba_sr.py: every option checks, and a run on TFDS mock data."""

import itertools
import json
import os
import subprocess
import sys

import pytest

from bpd_jax import config_checks

import train_configs
import xla_flags

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.mark.parametrize('k,base,eps,topk,min_block,local', list(
    itertools.product([1, 2, 8, 10], ['frozen', 'finetuned'], [0, 2],
                      [0, 2], [1, 2], [False, True])))
def test_every_option_combination_passes_the_checks(k, base, eps, topk,
                                                    min_block, local):
  if min_block > k:
    return
  arg = (f'k={k},base={base},eps={eps},topk={topk},min_block={min_block}'
         + (',runlocal' if local else ''))
  config = train_configs.load_config('celeba_sr', arg)
  config_checks.check(config)
  assert config.model.num_proposal_heads == k
  assert config.train.freeze_base == (base == 'frozen')
  assert (f'distance:{eps}' in config.eval.criteria) == bool(eps)
  assert (f'top-k:{topk}' in config.eval.criteria) == bool(topk)
  assert all(min_block <= j <= k for j in config.eval.ks)
  assert config.task.high_res == (16 if local else 32)


def test_paper_setting_by_default():
  config = train_configs.load_config('celeba_sr')
  assert (config.task.dataset, config.task.high_res, config.task.low_res) == (
      'celeb_a', 32, 8)
  assert config.eval.ks == (2, 4, 6, 8)
  assert config.eval.max_len == 3072
  assert (config.task.reference, config.task.reference_path) == ('linear', '')


def test_the_reference_filter_follows_targets_and_init_from():
  """Residuals come from the fitted filter, intensities have none, and
  heads trained on another run's base read that run's filter."""
  load = lambda arg: train_configs.load_config('celeba_sr', arg).task
  assert load('k=8,init_from=/runs/base').reference_path == (
      '/runs/base/reference_filter.npz')
  assert load('image_targets=intensities').reference == 'bicubic'
  bicubic = load('reference=bicubic,init_from=/runs/base')
  assert (bicubic.reference, bicubic.reference_path) == ('bicubic', '')


@pytest.mark.parametrize('arg,message', [
    ('k=0', 'k=0 must be >= 1'),
    ('base=both', "base='both' is not one of"),
    ('eps=-1', 'eps=-1 and topk=0 must be >= 0'),
    ('k=4,min_block=5', r'min_block=5 must be in \[1, k=4\]'),
    ('k=1,init_from=/x', 'needs k >= 2'),
])
def test_bad_options(arg, message):
  with pytest.raises(ValueError, match=message):
    train_configs.load_config('celeba_sr', arg)


# A whole training run (~30 s); the pipeline has its own tests.
@pytest.mark.slow
def test_runlocal_trains_and_reports_on_mock_celeba(tmp_path):
  """The whole job on TFDS mock data: train, decode, the report and grid."""
  result = subprocess.run(
      [sys.executable, '-m', 'bpd_jax.main',
       '--config=configs/celeba_sr.py:runlocal,k=2,eps=8',
       f'--workdir={tmp_path}', '--config.eval.num_examples=2',
       '--config.eval.grid_examples=2'],
      cwd=ROOT, capture_output=True, text=True, timeout=900,
      # One device; compiled fast as in the test process.
      env={**os.environ, 'XLA_FLAGS': xla_flags.COMPILE_FAST})
  assert result.returncode == 0, result.stderr[-3000:]
  report = json.loads((tmp_path / 'sr_test.json').read_text())
  rows = {row['decoder']: row for row in report['rows']}
  assert list(rows) == ['bicubic', 'fitted filter', 'greedy',
                        'blockwise k=2', 'blockwise k=2 distance:8']
  assert (tmp_path / 'reference_filter.npz').exists()
  assert rows['blockwise k=2']['identical_to_greedy'] == 1.0
  assert report['image_shape'] == [16, 16, 3]
  assert (tmp_path / 'sr_test.png').exists()
  # Each process preprocessed its own shard once, into the workdir.
  assert any(name.startswith('celeb_a.mock')
             for name in os.listdir(tmp_path / 'data'))
