"""configs/sr_demo.py: checks, its embedded photos task, and the quick run."""

import json
import os
import subprocess
import sys

import pytest

from bpd_jax import config_checks
from bpd_jax import tasks
from bpd_jax.models import factory

import train_configs
import xla_flags

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.mark.parametrize('arg', [None, 'quick', 'window=3',
                                 'reference=bicubic',
                                 'image_targets=intensities'])
def test_config_passes_the_checks(arg):
  config_checks.check(train_configs.load_config('sr_demo', arg))


def test_task_and_model_fit_the_images(tmp_path):
  config = train_configs.load_config('sr_demo')
  config.task.sizes = dict(train=32, validation=4)
  task = tasks.load_task(config.task, str(tmp_path))
  model = factory.model_config_from(config, task.vocab.vocab_size)
  assert task.image_shape == (16, 16, 3) and task.low_res_shape == (8, 8, 3)
  source, target = task.encoded('train')[0]
  assert len(source) == model.max_source_len == 192
  assert len(target) == config.eval.max_len == 768
  # Every k decoded fits the decoder's positions (output + k).
  assert 768 + max(config.eval.ks) <= model.max_target_len
  # A query block is one image row (3 intensities a pixel).
  assert model.local_attention_block == 16 * 3
  # Residuals from a 5x5 filter fitted on the training crops, kept with
  # the run.
  assert task.vocab.reference.window == 5
  assert (tmp_path / 'reference_filter.npz').exists()


def test_bad_eval_fields_stop_before_any_work():
  config = train_configs.load_config('sr_demo')
  config.eval.max_len = 700
  with pytest.raises(ValueError, match='eval.max_len=700 must be 768'):
    config_checks.check(config)
  config = train_configs.load_config('sr_demo')
  config.eval.criteria = ()
  with pytest.raises(ValueError, match='must be a non-empty tuple'):
    config_checks.check(config)
  config.eval.criteria = ('exact', 'distance:-1')
  with pytest.raises(ValueError, match='eps'):
    config_checks.check(config)
  config = train_configs.load_config('sr_demo')
  config.train.input_dropout = 1.0
  with pytest.raises(ValueError, match=r'input_dropout=1.0 must be a finite '
                     r'number in \[0, 1\)'):
    config_checks.check(config)
  config = train_configs.load_config('sr_demo', 'window=4')
  with pytest.raises(ValueError, match='image.source_window=4 must be 0 or '
                     'an odd integer'):
    config_checks.check(config)
  config = train_configs.load_config('sr_demo')
  config.train.scheduled_sampling = 1.5
  with pytest.raises(ValueError, match='scheduled_sampling=1.5'):
    config_checks.check(config)


@pytest.mark.slow
def test_quick_run_writes_the_report_and_grid(tmp_path):
  """docs/guide/images.md's super-resolution command in its quick form."""
  result = subprocess.run(
      [sys.executable, '-m', 'bpd_jax.main',
       '--config=configs/sr_demo.py:quick', f'--workdir={tmp_path}'],
      cwd=ROOT, capture_output=True, text=True, timeout=1200,
      # One device; compiled fast as in the test process.
      env={**os.environ, 'XLA_FLAGS': xla_flags.COMPILE_FAST})
  assert result.returncode == 0, result.stderr[-3000:]
  report = json.loads((tmp_path / 'sr_validation.json').read_text())
  exact = [r for r in report['rows'] if r.get('criterion') == 'exact'
           and r['decoder'] != 'greedy']
  assert exact and all(r['identical_to_greedy'] == 1.0 for r in exact)
  assert (tmp_path / 'sr_validation.png').exists()
  assert report['rows'][1]['decoder'] == 'fitted filter'
