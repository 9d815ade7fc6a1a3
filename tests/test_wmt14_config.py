"""configs/wmt14_base.py: every paper run as an option, each one checked.

The `runlocal` option trains on TFDS mock data (no data dir) with a tiny
model, so the whole path (TFDS, vocabulary, buckets, phases, checkpoints,
decoding, both BLEUs) runs here in seconds.
"""

import itertools
import json
import os
import subprocess
import sys

import jax
import pytest

from bpd_jax import config_checks
from bpd_jax import distillation
from bpd_jax import evaluation
from bpd_jax import jobs
from bpd_jax.training import train

from train_configs import load_config
import xla_flags

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def wmt_config(arg=None):
  """configs/wmt14_base.py's get_config(arg)."""
  return load_config('wmt14_base', arg)


def test_every_option_combination_builds_and_passes_the_checks():
  checked = 0
  for k, base, distilled, criterion, min_block, init, local in (
      itertools.product((1, 2, 4, 6, 8, 10), ('frozen', 'finetuned'),
                        ('', '/data/distilled'), ('exact', 'top-2', 'top-3'),
                        (1, 2), ('', '/runs/base'), (False, True))):
    if min_block > k or (init and k == 1):
      continue
    arg = (f'k={k},base={base},distilled={distilled},criterion={criterion},'
           f'min_block={min_block},init_from={init},runlocal={local}')
    config = wmt_config(arg)
    config_checks.check(config)
    assert config.model.num_proposal_heads == k
    assert tuple(config.eval.ks) == ((k,) if k > 1 else ())
    assert config.train.freeze_base == (base == 'frozen')
    assert config.eval.min_block == min_block
    assert config.task.name == ('parallel_text' if distilled
                                else 'tfds_translation')
    assert (config.train.base_steps == 0) == bool(init)
    assert (config.train.head_steps > 0) == (k > 1)
    if init:
      assert config.task.vocab_path == f'{init}/vocab.model'
    checked += 1
  assert checked == 24 + 5 * 96  # k=1 has no min_block=2 nor init_from.


def test_paper_scale_defaults():
  config = wmt_config()
  assert config.task.dataset == 'wmt14_translate/de-en'
  assert config.task.vocab_size == 32_000 and config.eval.split == 'test'
  assert (config.model.size, config.model.num_proposal_heads) == ('base', 1)
  assert config.train.tokens_per_batch == 32_768
  assert wmt_config('k=8,criterion=top-3').eval.criteria == ('top-k:3',)


@pytest.mark.parametrize('arg,message', [
    ('k=0', 'k=0 must be >= 1'),
    ('base=melted', "base='melted' is not one of"),
    ('criterion=top-5', "criterion='top-5' is not one of"),
    ('k=2,min_block=3', r'min_block=3 must be in \[1, k=2\]'),
    ('init_from=/runs/base', 'needs k >= 2'),
    ('beam=4', "unknown config option 'beam'"),
])
def test_bad_options(arg, message):
  with pytest.raises(ValueError, match=message):
    wmt_config(arg)


@pytest.mark.parametrize('section,field,value,message', [
    ('train', 'tokens_per_batch', 0, 'needs token-count batches'),
    ('train', 'bucket_lengths', (32, 16), 'strictly ascending'),
    ('train', 'bucket_lengths', (8, 16), 'add a bucket of 32'),
    ('task', 'dataset', 'wmt14', 'must be a TFDS "name/config"'),
    ('task', 'max_source_len', 64, 'exceeds model.max_source_len=32'),
])
def test_bad_fields(section, field, value, message):
  config = wmt_config('runlocal')
  config[section][field] = value
  with pytest.raises(ValueError, match=message):
    config_checks.check(config)


def local_config(arg):
  """The config of `arg`, on the 8 test devices: training batches split
  over all 8, batch-1 decoding on one of them."""
  return wmt_config(arg)


def quiet(_):
  pass


@pytest.fixture(scope='module')
def local_base(tmp_path_factory):
  """A runlocal base (k=1), trained and decoded: (workdir, report)."""
  base_dir = str(tmp_path_factory.mktemp('base'))
  config = local_config('runlocal')
  config_checks.check(config)
  model, task = train.train(config, base_dir, log=quiet)
  return base_dir, evaluation.report(config, base_dir, model, task,
                                     log=quiet)


# A whole training run (~30 s); the pipeline has its own tests.
@pytest.mark.slow
def test_runlocal_base_trains_and_decodes(local_base):
  base_dir, report = local_base
  assert jax.device_count() == 8
  assert os.path.exists(os.path.join(base_dir, 'vocab.model'))
  assert os.path.exists(os.path.join(base_dir, 'eval_test.json'))
  assert [r['decoder'] for r in report['rows']] == ['greedy']
  assert report['examples'] == 4


@pytest.mark.slow
def test_runlocal_heads_on_a_base_train_and_decode(local_base, tmp_path):
  """k=4 heads fine-tuned on the base, decoded with top-2 and l=2."""
  base_dir, _ = local_base
  heads_dir = str(tmp_path / 'k4')
  config = local_config(f'runlocal,k=4,base=finetuned,criterion=top-2,'
                        f'min_block=2,init_from={base_dir}')
  config_checks.check(config)
  lines = []
  model, task = train.train(config, heads_dir, log=lines.append)
  assert any('Warm start of the base' in line for line in lines)
  assert any(line.startswith('Buckets (length: global rows): 16: 32, 32: 16')
             for line in lines)
  assert not os.path.exists(os.path.join(heads_dir, 'vocab.model'))
  printed = []
  evaluation.report(config, heads_dir, model, task, log=printed.append)
  report = json.loads(open(os.path.join(heads_dir, 'eval_test.json')).read())
  assert [r['decoder'] for r in report['rows']] == [
      'greedy', 'blockwise k=4 top-k:2 l=2']
  assert report['examples'] == 4
  assert 'tok:intl' in report['bleu_intl_signature']
  assert 'tok:13a' in report['bleu_signature']
  table = next(line for line in printed if line.startswith('| decoder'))
  assert [c.strip() for c in table.split('|')[2:4]] == ['bleu', 'bleu_intl']


@pytest.mark.slow
def test_runlocal_distilled_run(local_base, tmp_path):
  """Distil with the runlocal base, then train k=2 heads on the corpus."""
  base_dir, corpus = local_base[0], str(tmp_path / 'corpus')
  config = local_config('runlocal')
  # bpd_jax.distill shards its batches over the mesh: one device for batch 1.
  config.mesh.shape = (1,)
  model, task = jobs.load(config, base_dir)
  counts = distillation.distill(config, model, task, corpus, log=quiet)
  assert set(counts) == {'train', 'validation', 'test'}
  config = local_config(f'runlocal,k=2,distilled={corpus},'
                        f'init_from={base_dir}')
  config_checks.check(config)
  model, task = train.train(config, str(tmp_path / 'k2'), log=quiet)
  report = evaluation.report(config, str(tmp_path / 'k2'), model, task,
                             log=quiet)
  assert report['rows'][1]['identical_to_greedy'] == 1.0


def run_job(module, *flags):
  return subprocess.run(
      [sys.executable, '-m', f'bpd_jax.{module}', *flags], cwd=ROOT,
      capture_output=True, text=True, timeout=600,
      # One device; compiled fast as in the test process.
      env={**os.environ, 'XLA_FLAGS': xla_flags.COMPILE_FAST})


@pytest.mark.parametrize('module,flags,message', [
    ('main', ['--config=configs/wmt14_base.py:data_dir=/nonexistent/tfds'],
     "task.data_dir='/nonexistent/tfds' does not exist"),
    ('evaluate', ['--config=configs/wmt14_base.py:runlocal'],
     'no checkpoints in'),  # jobs.setup: before the task (its vocabulary).
    ('main', ['--config=configs/wmt14_base.py:runlocal',
              '--config.task.splits.test=newstest2014'],
     "split 'newstest2014' is not one of"),
])
def test_jobs_stop_before_any_work(tmp_path, module, flags, message):
  result = run_job(module, *flags, f'--workdir={tmp_path}')
  assert result.returncode != 0
  assert message in result.stderr, result.stderr[-2000:]
  assert not (tmp_path / 'checkpoints').exists()
  assert not (tmp_path / 'vocab.model').exists()
