"""A run is opened one way by the training job and by every reader."""

import json

import pytest

from bpd_jax.infra import errors
from bpd_jax.infra import workdir as workdir_lib
from bpd_jax.training import runs

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
