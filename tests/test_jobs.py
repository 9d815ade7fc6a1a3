"""The jobs' shared flags and set-up."""

import os
import re
import subprocess
import sys
import types

import jax.numpy as jnp
import pytest
from absl import app

from bpd_jax import jobs
from bpd_jax.infra import checkpoints
from bpd_jax.infra import errors
from bpd_jax.infra import workdir
from bpd_jax.tasks.lm import python_source

from test_main import ROOT
from train_configs import load_config
from train_configs import tiny_config

@pytest.fixture
def given_flags(tmp_path, monkeypatch):
  """--config (the tiny config) and --workdir as a command line gives them."""
  config = tiny_config()
  monkeypatch.setattr(jobs, 'CONFIG', types.SimpleNamespace(value=config))
  monkeypatch.setattr(jobs, 'WORKDIR',
                      types.SimpleNamespace(value=str(tmp_path)))
  return config, tmp_path


def test_setup_checks_loads_and_runs_the_jobs_check(given_flags):
  config, workdir = given_flags
  seen = []
  job = jobs.setup(['job'], init='random',
                   check=lambda c: seen.append(c) or 'options')
  assert seen == [config] and job.options == 'options'
  assert job.workdir == str(workdir)
  assert job.model.config.vocab_size == job.task.vocab.vocab_size
  assert jobs.setup(['job']).model is None


def test_setup_stops_before_any_work(given_flags):
  config, _ = given_flags
  with pytest.raises(app.UsageError, match='Unexpected arguments'):
    jobs.setup(['job', 'extra'])
  with pytest.raises(errors.MissingFileError, match='no checkpoints in .* '
                     'or pass --init=random'):
    jobs.setup(['job'], init='checkpoint', random_hint=True)

  def refuse(_):
    raise ValueError('not this one')
  with pytest.raises(app.UsageError, match='not this one'):
    jobs.setup(['job'], check=refuse)
  config.train.batch_size = 0
  with pytest.raises(ValueError, match='train.batch_size=0'):
    jobs.setup(['job'])
  config.train.batch_size = 8
  config.mesh.shape = (16,)  # The tests have 8 devices.
  with pytest.raises(errors.ConfigError, match=r'mesh.shape=\(16,\) needs 16 '
                     r'devices; there are 8\.'):
    jobs.setup(['job'])


def test_a_run_from_an_imported_model_reads_its_base_before_any_checkpoint(
    tmp_path, monkeypatch, capsys):
  # What the distill job reads to continue prompts (configs/hf_heads.py).
  folder = os.path.join(ROOT, 'tests', 'data', 'tiny_gpt2')
  code = tmp_path / 'code'
  code.mkdir()
  (code / 'a.py').write_text('def f(x):\n    return x + 1\n' * 20)
  config = load_config('hf_heads', f'model={folder},data={code},k=2')
  monkeypatch.setattr(jobs, 'CONFIG', types.SimpleNamespace(value=config))
  monkeypatch.setattr(jobs, 'WORKDIR', types.SimpleNamespace(
      value=str(tmp_path / 'run')))
  job = jobs.setup(['job'], init='checkpoint')
  assert job.model.config.eos_id == job.task.vocab.eos_id == 383
  assert 'No checkpoint in' in capsys.readouterr().out
  # A run to start from is no imported model: a checkpoint is needed.
  config.train.init_from = str(tmp_path / 'another_run')
  with pytest.raises(errors.MissingFileError, match='no checkpoints in'):
    jobs.setup(['job'], init='checkpoint')


def user_error_cases(tmp_path):
  """(name, command, stderr pattern, exit status), each fault injected.

  One subprocess per kind of error (each costs seconds of imports); the
  variants of a kind are tested in-process (test_infra_workdir.py, the task and
  config tests, `test_override_errors_name_the_section_and_close_names`).
  """
  demo = '--config=configs/demo.py'
  # A parallel corpus with a byte that is not UTF-8: it stops before any
  # work (as an empty split does: the same path, tests of parallel_text).
  data = tmp_path / 'bad_byte'
  data.mkdir()
  (data / 'train.en').write_bytes(b'a dog\ntwo\n')
  (data / 'train.de').write_bytes(b'ein Hund\n\xff zwei\n')
  (data / 'val.en').write_bytes(b'a cat\n')
  (data / 'val.de').write_bytes(b'eine Katze\n')
  multi30k = ['--config=configs/multi30k.py:quick',
              '--config.task.vocab_type=words']
  # A run trained with the demo config (its record and a checkpoint dir).
  trained = tmp_path / 'trained'
  (trained / 'checkpoints').mkdir(parents=True)
  workdir.check_config(load_config('demo'), str(trained), 'test',
                       training=True, log=lambda line: None)
  # A run whose only checkpoint is damaged.
  damaged = tmp_path / 'damaged'
  store = checkpoints.Checkpoints(str(damaged / 'checkpoints'))
  store.save(1, {'params': {'w': jnp.arange(20_000, dtype=jnp.float32)}})
  store.close()
  data_file = max((p for p in (damaged / 'checkpoints' / '1').rglob('*')
                   if '/d/' in str(p)), key=lambda p: p.stat().st_size)
  data_file.write_bytes(data_file.read_bytes()[:100])
  (tmp_path / 'a_file').write_text('')
  # Python code whose validation files are empty: evaluation, after
  # training, had nothing to decode.
  wanted = {'train': ['x = 1\n'] * 3, 'validation': [''] * 2,
            'test': ['x = 1\n']}
  (tmp_path / 'code').mkdir()
  for i in range(200):
    texts = wanted[python_source.split_of(f'm{i}.py')]
    if texts:
      (tmp_path / 'code' / f'm{i}.py').write_text(texts.pop())
  return [
      ('bad value', ['main', demo, f'--workdir={tmp_path}/w1',
                     '--config.train.learning_rate=inf'],
       r'train\.learning_rate=inf must be a finite number in \(0, '
       r'3\.40282e\+38\]\.', 2),
      ('unknown field', ['main', demo, f'--workdir={tmp_path}/w2',
                         '--config.model.num_head=3'],
       r"--config\.model\.num_head: section model has no field 'num_head'; "
       r'closest: num_heads, num_kv_heads, num_proposal_heads\.', 2),
      ('missing flag', ['main', demo],
       r'--workdir must have a value other than None', 2),
      ('no checkpoint', ['evaluate', demo, f'--workdir={tmp_path}/w4'],
       r'no checkpoints in .*w4: train first', 2),
      ('not UTF-8', ['main', *multi30k, f'--workdir={tmp_path}/w5',
                     f'--config.task.data_dir={tmp_path}/bad_byte'],
       r'line 2 of .*bad_byte/train\.de: byte 0xff is not UTF-8', 2),
      ('changed config', ['main', demo, f'--workdir={trained}',
                          '--config.model.d_model=64'],
       r'was trained with another config: model\.d_model 128 \(saved\) vs '
       r'64 \(now\)', 2),
      ('held workdir', ['main', demo, f'--workdir={tmp_path}/held'],
       rf'held is in use by the test \(pid {os.getpid()} on host', 2),
      ('unwritable workdir', ['main', demo,
                              f'--workdir={tmp_path}/a_file/run'],
       r'cannot write to the workdir .*a_file/run: Not a directory', 2),
      ('damaged checkpoint', ['evaluate', demo, f'--workdir={damaged}'],
       r'no checkpoint in .*damaged/checkpoints reads back intact \(1 '
       r'tried; newest: checkpoint step 1', 2),
      # The config file and its options: one line before any import of a
      # task (they were 12 to 56 lines of traceback).
      ('no config file', ['main', '--config=configs/nope.py',
                          f'--workdir={tmp_path}/w11'],
       r'^Error: --config=configs/nope\.py: no such file\.$', 2),
      ('not a config file', ['main', '--config=README.md',
                             f'--workdir={tmp_path}/w12'],
       r'--config=README\.md: not a Python config file \(line \d+', 2),
      ('bad config option', ['evaluate', '--config=configs/demo.py:quikc',
                             f'--workdir={tmp_path}/w13'],
       r"--config=configs/demo\.py:quikc: unknown config option 'quikc'; "
       r'options: distilled, heads, quick\.', 2),
      # ml_collections holds back an OSError of get_config until the config
      # is read.
      ('a folder the config reads is missing',
       ['main', f'--config=configs/hf_heads.py:model={tmp_path}/none',
        f'--workdir={tmp_path}/w15'],
       r'model=.*/none: checkpoint folder .*/none not found', 2),
      ('mesh beyond the devices', ['main', demo, f'--workdir={tmp_path}/w14',
                                   '--config.mesh.shape=(4096,)'],
       r'mesh\.shape=\(4096,\) needs 4096 devices; there are \d+\.', 2),
      ('LM split with nothing to evaluate',
       ['main', f'--config=configs/lm_demo.py:quick,root={tmp_path}/code',
        f'--workdir={tmp_path}/w10'],
       r"split 'validation' has nothing to evaluate: none of its 2 file\(s\) "
       r"under task.root='.*code'", 2),
  ]


# One case of each stage a job stops at by default (its flags, the config
# file, the config's values, the data, the workdir, a checkpoint, the split
# to evaluate); the others of the same stage slow: each case is a process
# importing JAX, and the whole set at once held a core for ~30 s.
DEFAULT_USER_ERRORS = ('bad value', 'missing flag', 'not UTF-8',
                       'held workdir', 'damaged checkpoint', 'no config file',
                       'LM split with nothing to evaluate')


@pytest.mark.parametrize('default', [
    True, pytest.param(False, marks=pytest.mark.slow)])
def test_user_errors_are_one_line_and_exit_2(tmp_path, default):
  held = workdir.Lock.acquire(str(tmp_path / 'held'), 'the test')
  cases = [case for case in user_error_cases(tmp_path)
           if (case[0] in DEFAULT_USER_ERRORS) == default]
  if default:  # A renamed case is not dropped from the default run.
    assert len(cases) == len(DEFAULT_USER_ERRORS)
  # All at once: each process spends its seconds importing JAX and TF.
  jobs_run = {name: subprocess.Popen(
      [sys.executable, '-m', f'bpd_jax.{command[0]}', *command[1:]],
      cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
              for name, command, _, _ in cases}
  try:
    for name, _, pattern, status in cases:
      stdout, stderr = jobs_run[name].communicate(timeout=300)
      assert jobs_run[name].returncode == status, (name, stderr[-2000:])
      lines = stderr.splitlines()
      assert len(lines) == 1 and lines[0].startswith('Error: '), (
          name, stderr[-2000:])
      assert re.search(pattern, lines[0]), (name, lines[0])
      assert len(stdout.splitlines()) <= 3, (name, stdout)
  finally:
    held.release()


@pytest.mark.parametrize('value,message', [
    ('configs/demo.py:heads=bogus', "config option heads='bogus' is not one "
     "of ('independent', 'joint', 'sequential', 'autoregressive', "
     "'block', 'block_corrected')."),
    ('configs/multi30k.py:k=abc', "unknown config option 'k'; options: base, "
     'block_layers, correction, data_dir,'),
    ('configs/hf_heads.py:k=abc', "config option k='abc' is not of type "
     'int.'),
    ('configs/celeba_sr.py:k=0', 'config option k=0 must be >= 1.'),
    ('configs/base.py:quick', 'its get_config takes no options after a '
     'colon.'),
    ('configs', 'a directory, not a config file.'),
    ('configs/../README.md', 'not a Python config file'),
    ('configs/hf_heads.py:model=/none', 'checkpoint folder /none not found'),
    ('configs/hf_heads.py:model=tests', 'tests/config.json not found: a '
     'Hugging Face model folder holds it'),
])
def test_config_file_errors_name_the_file_and_the_option(value, message):
  value = os.path.join(ROOT, value)
  error = jobs._config_file_error(value)  # pylint: disable=protected-access
  assert error.startswith(f'--config={value}: ') and message in error
  assert '\n' not in error


@pytest.mark.parametrize('name', sorted(
    name for name in os.listdir(os.path.join(ROOT, 'configs'))
    if name.endswith('.py') and name != 'base.py'))
def test_every_configs_options_are_checked(name):
  # Each config reads its options through config_options.parse.
  path = os.path.join(ROOT, 'configs', name)
  assert jobs._config_file_error(f'{path}:bogus=1').startswith(  # pylint: disable=protected-access
      f"--config={path}:bogus=1: unknown config option 'bogus'; options: ")


def test_a_file_without_get_config_is_named(tmp_path):
  path = tmp_path / 'settings.py'
  path.write_text('learning_rate = 1e-3\n')
  assert jobs._config_file_error(str(path)) == (  # pylint: disable=protected-access
      f'--config={path}: not a config file: it defines no get_config(arg).')


def test_override_errors_name_the_section_and_close_names():
  argv = ['job', '--config=configs/demo.py', '--workdir=/w']
  message = lambda override: jobs._override_error(  # pylint: disable=protected-access
      argv + [override], KeyError(override))
  assert message('--config.modl.d_model=3') == (
      "--config.modl.d_model: the config has no field 'modl'; closest: "
      'model.')
  assert message('--config.model.head_layer.x=3') == (
      '--config.model.head_layer.x: model.head_layer is a value, not a '
      'section.')
  assert message('--config.model.zzz=3').startswith(
      "--config.model.zzz: section model has no field 'zzz'; its fields: "
      'block_layers, correction_recurrent, d_ff,')
