"""A run is opened one way by the training job and by every reader."""

import json
import os
import re
import shutil
import subprocess
import sys

import jax
import numpy as np
import pytest
from flax import nnx

import bpd_jax
from bpd_jax import generate
from bpd_jax.infra import errors
from bpd_jax.infra import workdir as workdir_lib
from bpd_jax.models import factory
from bpd_jax.training import runs
from bpd_jax.training import train

from train_configs import frozen_base_run
from train_configs import ROOT
from train_configs import tiny_config


def test_training_records_the_vocabulary_and_readers_compare_it(tmp_path):
  config, lines = tiny_config(), []
  workdir_lib.check_config(config, str(tmp_path), 'bpd_jax.main',
                           training=True, log=lines.append)
  task, model_config = runs.open_run(config, str(tmp_path), 'bpd_jax.main',
                                     None, lines.append)
  record_path = tmp_path / workdir_lib.CONFIG_FILE
  record = json.loads(record_path.read_text())
  assert record['vocabulary.fingerprint'] == task.vocab.fingerprint
  assert model_config.vocab_size == task.vocab.vocab_size
  # The same vocabulary reads the run; another is refused, unless the
  # weights are random (no run to compare with).
  runs.open_run(config, str(tmp_path), 'bpd_jax.evaluate', 'checkpoint')
  record['vocabulary.fingerprint'] = 'another'
  record_path.write_text(json.dumps(record))
  with pytest.raises(errors.WorkdirError, match='another vocabulary'):
    runs.open_run(config, str(tmp_path), 'bpd_jax.evaluate', 'checkpoint')
  with pytest.raises(errors.WorkdirError, match='another vocabulary'):
    runs.open_run(config, str(tmp_path), 'bpd_jax.main', None, lines.append)
  runs.open_run(config, str(tmp_path), 'bpd_jax.bench', 'random')


@pytest.mark.parametrize('init', [None, 'checkpoint', 'random'])
def test_special_ids_other_than_the_vocabularys_are_refused(tmp_path, init):
  config = tiny_config()
  config.model.eos_id = 5
  with pytest.raises(errors.ConfigError, match=r'eos_id=5'):
    runs.open_run(config, str(tmp_path), 'bpd_jax.main', init,
                  log=lambda _: None)


# load_run: a trained run from its workdir alone, from any directory.

def _one_line(error, message, call, *args, **kwargs):
  with pytest.raises(error) as raised:
    call(*args, **kwargs)
  assert '\n' not in str(raised.value)
  assert re.search(message, str(raised.value)), str(raised.value)


@pytest.fixture(scope='module')
def frozen_run(tmp_path_factory):
  """Heads on a frozen imported model, trained with configs/hf_heads.py:
  (config, model folder, workdir, the trained model's greedy tokens of
  PROMPT, the trained model)."""
  config, folder, workdir = frozen_base_run(
      str(tmp_path_factory.mktemp('frozen')), steps=2)
  model, task = train.train(config, workdir, log=lambda _: None)
  prompt = [[task.vocab.bos_id] + task.vocab.encode(PROMPT)]
  greedy = generate.greedy(model, prompt, max_len=12)
  return config, folder, workdir, np.asarray(greedy.tokens), model


PROMPT = 'def f3(x):'
# Decodes the run in the directory it is started in, as a user's script
# would: greedy and blockwise tokens, the vocabulary's text, the step.
LOAD_AND_DECODE = f"""
import json, sys
import bpd_jax
from bpd_jax import generate

run = bpd_jax.load_run(sys.argv[1])
prompt = [[run.vocab.bos_id] + run.vocab.encode({PROMPT!r})]
greedy = generate.greedy(run.model, prompt, max_len=12)
fast = generate.Decoder(run.model).blockwise(prompt, k=4, max_len=12)
print(json.dumps(dict(greedy=greedy.tokens.tolist(),
                      blockwise=fast.tokens.tolist(), step=run.step,
                      init_from=run.config.train.init_from)))
"""


@pytest.mark.slow  # 15 s: a fresh process compiles its decoders again.
def test_a_run_opens_from_its_workdir_in_another_directory(frozen_run,
                                                           tmp_path):
  """As a user's script: another directory, no configs/ to import."""
  config, _, workdir, tokens, _ = frozen_run
  script = tmp_path / 'decode.py'
  script.write_text(LOAD_AND_DECODE)
  env = dict(os.environ, PYTHONPATH=ROOT)  # The library, not configs/.
  done = subprocess.run([sys.executable, str(script), workdir],
                        cwd=tmp_path, env=env, capture_output=True,
                        text=True, timeout=300)
  assert done.returncode == 0, done.stderr[-3000:]
  decoded = json.loads(done.stdout.splitlines()[-1])
  assert decoded['greedy'] == decoded['blockwise'] == tokens.tolist()
  assert (decoded['step'], decoded['init_from']) == (
      2, config.train.init_from)


def test_load_run_opens_the_run_as_the_job_left_it(frozen_run, monkeypatch,
                                                   tmp_path):
  config, _, workdir, tokens, trained = frozen_run
  monkeypatch.chdir(tmp_path)  # Another directory.
  assert bpd_jax.load_run is runs.load_run  # The package's own name.
  run = runs.load_run(workdir, log=lambda _: None)
  assert run.step == 2
  # The config the job ran with, from its record; its vocabulary.
  assert workdir_lib.config_fields(run.config) == workdir_lib.config_fields(
      config)
  with open(os.path.join(workdir, 'config.json')) as f:
    record = json.load(f)
  assert run.vocab.fingerprint == record['vocabulary.fingerprint']
  # The trained heads, the imported base.
  restored, expected = (jax.tree.leaves(nnx.state(m, nnx.Param))
                        for m in (run.model, trained))
  assert len(restored) == len(expected)
  for a, b in zip(restored, expected):
    np.testing.assert_array_equal(a, b)
  prompt = [[run.vocab.bos_id] + run.vocab.encode(PROMPT)]
  np.testing.assert_array_equal(
      generate.greedy(run.model, prompt, max_len=12).tokens, tokens)


def test_load_run_errors_are_one_line(frozen_run, tmp_path):
  config, folder, workdir, _, trained = frozen_run
  missing = str(tmp_path / 'none')
  _one_line(errors.MissingFileError, rf'^no run in {missing}: no such '
            rf'folder\.$', runs.load_run, missing)
  _one_line(errors.MissingFileError, rf'^{tmp_path} holds no config\.json: '
            rf'not the workdir of a training run', runs.load_run,
            str(tmp_path))
  untrained = tmp_path / 'untrained'
  untrained.mkdir()
  shutil.copy(os.path.join(workdir, 'config.json'), untrained)
  _one_line(errors.MissingFileError, rf'^no checkpoint in {untrained}: '
            rf'train first', runs.load_run, str(untrained))
  # The model folder moved: named, and read from its new place.
  moved = str(tmp_path / 'moved')
  os.rename(folder, moved)
  try:
    _one_line(errors.MissingFileError, rf'reads the tokenizer of the model '
              rf'folder {folder}, which is not there', runs.load_run,
              workdir)
    _one_line(errors.MissingFileError, rf'holds proposal heads on the '
              rf'frozen model of {folder}, which is no model folder now',
              factory.restore_model, config, workdir,
              trained.config.vocab_size)
    run = runs.load_run(workdir, base_folder=moved, log=lambda _: None)
    assert run.step == 2
  finally:
    os.rename(moved, folder)


def test_a_record_without_a_runs_fields_or_a_path_of_another_type(tmp_path):
  # A config.json that is JSON but not a run's record: one line naming it.
  (tmp_path / 'checkpoints').mkdir()
  (tmp_path / 'config.json').write_text(json.dumps({'model.d_model': 32}))
  _one_line(errors.WorkdirError, rf"^{tmp_path}/config\.json lacks the "
            rf"field '[a-z_]+', which every training run records",
            runs.load_run, str(tmp_path))
  # A fault of the code naming a field the record holds is not blamed on
  # the record: it propagates as itself.
  def faulty(*args):
    del args
    raise AttributeError("'d_model'")
  with pytest.MonkeyPatch.context() as patch:
    patch.setattr(runs, '_model_folder', faulty)
    with pytest.raises(AttributeError, match='d_model'):
      runs.load_run(str(tmp_path))
  _one_line(ValueError, r'^load_run: workdir=None is not a path\.$',
            runs.load_run, None)
  _one_line(ValueError, r'^load_run: base_folder=5 is not a path\.$',
            runs.load_run, str(tmp_path), base_folder=5)
