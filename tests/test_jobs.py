"""The jobs' shared flags and set-up."""

import re
import subprocess
import sys
import types

import pytest
from absl import app

from bpd_jax import errors
from bpd_jax import jobs

from test_main import ROOT
from train_configs import tiny_config

JOB_FLAGS = {
    'main': ['config', 'workdir'],
    'evaluate': ['config', 'workdir'],
    'distill': ['config', 'workdir', 'output_dir'],
    'bench': ['config', 'workdir', 'init', 'output_dir', 'quick'],
    'drafts': ['config', 'workdir', 'init', 'output_dir'],
}


def test_every_jobs_help_lists_its_flags():
  # All at once: each process spends its seconds importing JAX and TF.
  helps = {module: subprocess.Popen(
      [sys.executable, '-m', f'bpd_jax.{module}', '--help'], cwd=ROOT,
      stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
           for module in JOB_FLAGS}
  for module, names in JOB_FLAGS.items():
    stdout, _ = helps[module].communicate(timeout=300)  # absl exits with 1.
    for name in names:
      assert re.search(rf'^  --(\[no\])?{name}:', stdout, re.M), (
          module, name)


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
