"""The workdir lock (one job a workdir) and the run's config record."""

import json
import os
import signal
import subprocess
import sys

import pytest

from bpd_jax import config_checks
from bpd_jax import tasks
from bpd_jax.infra import errors
from bpd_jax.infra import workdir

import train_configs

ROOT = train_configs.ROOT

# A job holding the lock in another process until it is killed.
HOLDER = """
import sys, time
from bpd_jax.infra import workdir
workdir.Lock.acquire(sys.argv[1], 'holder_job')
print('locked', flush=True)
time.sleep(120)
"""


def lines():
  """A `log` that keeps its lines."""
  kept = []
  return kept, kept.append


def one_line(error) -> str:
  message = str(error.value)
  assert '\n' not in message
  return message


def test_acquire_release_reacquire_logs_nothing(tmp_path):
  path = str(tmp_path / 'w')  # Made by acquire.
  kept, log = lines()
  lock = workdir.Lock.acquire(path, 'job_a', log)
  record = json.loads((tmp_path / 'w' / 'job.lock').read_text())
  assert record['job'] == 'job_a' and record['pid'] == os.getpid()
  assert set(record) == {'job', 'pid', 'host', 'started'}
  lock.release()
  lock.release()  # Again: nothing.
  assert (tmp_path / 'w' / 'job.lock').read_text() == ''
  with workdir.Lock.acquire(path, 'job_b', log):
    pass
  assert kept == []


def test_second_acquire_in_one_process_refused(tmp_path):
  # flock is per open file description: a second open conflicts.
  with workdir.Lock.acquire(str(tmp_path), 'bpd_jax.main'):
    with pytest.raises(errors.WorkdirError) as error:
      workdir.Lock.acquire(str(tmp_path), 'bpd_jax.evaluate')
  message = one_line(error)
  assert message.startswith(f'{tmp_path} is in use by bpd_jax.main '
                            f'(pid {os.getpid()} on host ')
  assert ' UTC): wait for it to end, or use another --workdir.' in message


def test_unparseable_holder_named_another_job(tmp_path):
  (tmp_path / 'job.lock').write_text('{"job": "half')
  kept, log = lines()
  with workdir.Lock.acquire(str(tmp_path), 'a', log):
    (tmp_path / 'job.lock').write_text('{"job": "half')  # Mid-write.
    with pytest.raises(errors.WorkdirError, match='in use by another job:'):
      workdir.Lock.acquire(str(tmp_path), 'b')
  assert kept == ['took over the lock left by another job, which ended '
                  'without releasing it.']


def test_lock_of_a_killed_process_taken_over(tmp_path):
  env = dict(os.environ, PYTHONPATH=ROOT)
  holder = subprocess.Popen([sys.executable, '-c', HOLDER, str(tmp_path)],
                            stdout=subprocess.PIPE, text=True, env=env)
  try:
    assert holder.stdout.readline() == 'locked\n'
    with pytest.raises(errors.WorkdirError) as error:
      workdir.Lock.acquire(str(tmp_path), 'bpd_jax.main')
    assert f'in use by holder_job (pid {holder.pid} on host ' in one_line(
        error)
  finally:
    holder.send_signal(signal.SIGKILL)
    holder.wait()
    holder.stdout.close()
  kept, log = lines()
  with workdir.Lock.acquire(str(tmp_path), 'bpd_jax.main', log):
    pass
  assert len(kept) == 1
  assert kept[0].startswith(
      f'took over the lock left by holder_job (pid {holder.pid} on host ')
  assert kept[0].endswith('), which ended without releasing it.')


def test_unwritable_workdir(tmp_path):
  (tmp_path / 'file').write_text('')
  path = str(tmp_path / 'file' / 'w')  # Its parent is a regular file.
  with pytest.raises(errors.WorkdirError) as error:
    workdir.Lock.acquire(path, 'bpd_jax.main')
  assert one_line(error) == (f'cannot write to the workdir {path}: '
                             'Not a directory.')
  with pytest.raises(errors.WorkdirError, match='cannot write to the workdir'):
    workdir.check_config(train_configs.demo_config(), path, 'bpd_jax.main',
                         training=True)


def test_config_fields_flatten_and_read_back(tmp_path):
  config = train_configs.demo_config('distilled=/data')
  fields = workdir.config_fields(config)
  assert fields['model.num_heads'] == 4 and fields['seed'] == 0
  assert fields['eval.ks'] == [2, 4, 6, 8]
  assert fields['task.splits.validation'] == 'validation'
  assert fields['drafts.ks'] == [4, 8]
  workdir.check_config(config, str(tmp_path), 'bpd_jax.main', training=True)
  saved = json.loads((tmp_path / 'config.json').read_text())
  assert saved == workdir.config_fields(train_configs.demo_config(
      'distilled=/data'))


def train(config, path, **kwargs):
  """check_config as the training job calls it; returns the logged lines."""
  kept, log = lines()
  workdir.check_config(config, str(path), 'bpd_jax.main', training=True,
                       log=log, **kwargs)
  return kept


def read(config, path):
  """check_config as a reading job calls it; returns the logged lines."""
  kept, log = lines()
  workdir.check_config(config, str(path), 'bpd_jax.evaluate',
                       training=False, log=log)
  return kept


def test_first_start_saves_and_rerun_is_silent(tmp_path):
  assert train(train_configs.demo_config(), tmp_path) == []
  assert (tmp_path / 'config.json').exists()
  assert [p.name for p in tmp_path.iterdir()] == ['config.json']  # No temp.
  assert train(train_configs.demo_config(), tmp_path) == []
  assert read(train_configs.demo_config(), tmp_path) == []


@pytest.mark.parametrize('section, field, value, shown', [
    ('model', 'num_heads', 8, 'model.num_heads 4 (saved) vs 8 (now)'),
    ('task', 'vocab_size', 8000, 'task.vocab_size <absent> (saved) vs 8000 '
     '(now)'),
    ('train', 'learning_rate', 1e-3,
     'train.learning_rate 0.005 (saved) vs 0.001 (now)'),
])
def test_training_refuses_a_changed_field(tmp_path, section, field, value,
                                          shown):
  train(train_configs.demo_config(), tmp_path)
  config = train_configs.demo_config()
  config[section][field] = value
  with pytest.raises(errors.WorkdirError) as error:
    train(config, tmp_path)
  assert one_line(error) == (
      f'{tmp_path} was trained with another config: {shown}. Use another '
      "--workdir, or start a new run from this one's weights with "
      f'--config.train.init_from={tmp_path}.')


def test_a_record_from_before_an_added_field(tmp_path):
  """A run recorded before train.head_position_fraction existed trained
  its heads on every position: it resumes with 1.0, not with 0.5."""
  config = train_configs.demo_config()
  config.train.head_position_fraction = 1.0
  train(config, tmp_path)
  record = tmp_path / 'config.json'
  fields = json.loads(record.read_text())
  del fields['train.head_position_fraction']
  record.write_text(json.dumps(fields))
  assert train(config, tmp_path, write=False) == []
  assert read(config, tmp_path) == []
  config.train.head_position_fraction = 0.5
  with pytest.raises(errors.WorkdirError, match=(
      r'train.head_position_fraction 1.0 \(saved\) vs 0.5 \(now\)')):
    train(config, tmp_path)


def test_a_record_without_any_added_field_resumes_and_reads(tmp_path):
  """Each added field's value compares equal to its record as config.json
  writes it (a tuple reads back as a list): a run recorded before the
  fields existed, with the values they stand for, is no other config."""
  config = train_configs.demo_config()
  train(config, tmp_path)
  record = tmp_path / 'config.json'
  fields = json.loads(record.read_text())
  dropped = [field for field, value in workdir.ADDED_FIELDS.items()
             if fields.get(field, object()) == value]
  assert 'model.draft_feature_layers' in dropped
  record.write_text(json.dumps({field: value for field, value
                                in fields.items() if field not in dropped}))
  assert train(config, tmp_path, write=False) == []
  assert read(config, tmp_path) == []


def test_a_record_from_before_task_defaults_were_filled_in(tmp_path):
  """A run whose config left a task's optional fields out was recorded
  without them; the config check now fills them in (tasks.check), and
  the run still resumes and reads."""
  config = train_configs.load_config('sr_demo')
  defaults = tasks.get('embedded_images').defaults
  assert config.task.scales == defaults['scales']
  del config.task['scales']
  train(config, tmp_path)
  config_checks.check(config)
  assert config.task.scales == defaults['scales']
  assert train(config, tmp_path, write=False) == []
  assert read(config, tmp_path) == []


def test_an_image_run_recorded_before_fitted_references(tmp_path):
  """Residuals were bicubic's before task.reference existed: such a run
  resumes and reads with reference='bicubic' and refuses 'linear'."""
  config = train_configs.load_config('sr_demo', 'reference=bicubic')
  train(config, tmp_path)
  record = tmp_path / 'config.json'
  fields = json.loads(record.read_text())
  for field in ('task.reference', 'task.reference_window'):
    del fields[field]
  record.write_text(json.dumps(fields))
  assert train(config, tmp_path, write=False) == []
  assert read(config, tmp_path) == []
  with pytest.raises(errors.WorkdirError, match=(
      r"task.reference \"bicubic\" \(saved\) vs \"linear\" \(now\)")):
    train(train_configs.load_config('sr_demo'), tmp_path)


def test_training_names_every_refused_field(tmp_path):
  train(train_configs.demo_config(), tmp_path)
  config = train_configs.demo_config()
  config.model.num_heads = 8
  config.seed = 7
  config.train.base_steps = 800  # May change: not named.
  with pytest.raises(errors.WorkdirError) as error:
    train(config, tmp_path)
  assert ('another config: model.num_heads 4 (saved) vs 8 (now); seed 0 vs '
          '7. Use another') in one_line(error)
  assert json.loads((tmp_path / 'config.json').read_text())['seed'] == 0


def test_training_resumes_with_more_steps(tmp_path):
  train(train_configs.demo_config(), tmp_path)
  config = train_configs.demo_config()
  config.train.head_steps = 1200
  assert train(config, tmp_path, write=False) == [
      'resuming with changed train.head_steps 1000 -> 1200']
  saved = tmp_path / 'config.json'
  assert json.loads(saved.read_text())['train.head_steps'] == 1000
  assert train(config, tmp_path) == [
      'resuming with changed train.head_steps 1000 -> 1200']
  assert json.loads(saved.read_text())['train.head_steps'] == 1200
  assert train(config, tmp_path) == []


def test_training_takes_other_eval_and_mesh(tmp_path):
  train(train_configs.demo_config(), tmp_path)
  config = train_configs.demo_config()
  config.eval.ks = (4, 8)
  config.mesh.shape = (2, -1)
  assert train(config, tmp_path) == [
      'resuming with changed eval.ks [2, 4, 6, 8] -> [4, 8]; '
      'mesh.shape [-1] -> [2, -1]']


def test_reader_refuses_another_model(tmp_path):
  train(train_configs.demo_config(), tmp_path)
  config = train_configs.demo_config()
  config.model.d_model = 256
  with pytest.raises(errors.WorkdirError) as error:
    read(config, tmp_path)
  assert one_line(error) == (
      f'{tmp_path} holds a run of another model: model.d_model 128 (saved) '
      'vs 256 (now). Pass the config it was trained with (its fields are in '
      f'{tmp_path / "config.json"}).')


def test_reader_of_a_decoder_only_model_takes_longer_prompts(tmp_path):
  config = train_configs.demo_config()
  config.model.num_encoder_layers = 0
  train(config, tmp_path)
  config.model.max_source_len += 64  # No weight of its size.
  assert read(config, tmp_path) == []
  encoder_decoder = train_configs.demo_config()  # Its source positions.
  train(encoder_decoder, tmp_path / 'ed')
  encoder_decoder.model.max_source_len += 64
  with pytest.raises(errors.WorkdirError, match='model.max_source_len'):
    read(encoder_decoder, tmp_path / 'ed')


def test_reader_takes_other_training_eval_and_dropout(tmp_path):
  train(train_configs.demo_config(), tmp_path)
  config = train_configs.demo_config()
  config.train.learning_rate = 1e-3
  config.seed = 3
  config.eval.num_examples = 10
  config.model.dropout_rate = 0.3
  config.task.sizes.validation = 50
  assert read(config, tmp_path) == []


def test_no_record(tmp_path):
  from bpd_jax.tasks.text import vocab as vocab_lib
  # No checkpoints either: no run to compare with (the distill job reading
  # an imported base), so no line about a record there is no call for.
  log, note = lines()
  assert read(train_configs.demo_config(), tmp_path) == []
  workdir.check_vocabulary(vocab_lib.WordVocabulary(['a']), str(tmp_path),
                           'bpd_jax.distill', training=False, log=note)
  assert log == []
  (tmp_path / 'checkpoints').mkdir()
  assert read(train_configs.demo_config(), tmp_path) == [
      f'{tmp_path} has no saved config (config.json), so bpd_jax.evaluate '
      'does not check its config against the run.']
  # That line says it all: none naming a config.json that is not there.
  workdir.check_vocabulary(vocab_lib.WordVocabulary(['a']), str(tmp_path),
                           'bpd_jax.evaluate', training=False, log=note)
  assert log == []
  assert train(train_configs.demo_config(), tmp_path, write=False) == [
      f'{tmp_path} holds checkpoints from before configs were saved: '
      'bpd_jax.main could not check its config against that run, and saves '
      'it now as the run\'s config.json.']
  assert not (tmp_path / 'config.json').exists()
  assert len(train(train_configs.demo_config(), tmp_path)) == 1
  assert (tmp_path / 'config.json').exists()
  assert train(train_configs.demo_config(), tmp_path) == []


@pytest.mark.parametrize('text', ['{"seed": 0', '[1, 2]'])
def test_corrupt_record(tmp_path, text):
  (tmp_path / 'config.json').write_text(text)
  for training in (True, False):
    with pytest.raises(errors.WorkdirError) as error:
      workdir.check_config(train_configs.demo_config(), str(tmp_path),
                           'bpd_jax.main', training=training)
    message = one_line(error)
    assert str(tmp_path / 'config.json') in message
    assert 'delete it to run without the check' in message


def test_reader_refuses_another_head_type(tmp_path):
  """A checkpoint read with heads of another type is refused by name
  before any weights are read."""
  train(train_configs.demo_config('heads=independent'), tmp_path)
  config = train_configs.demo_config()
  assert config.model.head_layer == 'sequential'
  with pytest.raises(errors.WorkdirError,
                     match='model.head_layer "independent" \\(saved\\) vs '
                     '"sequential" \\(now\\)'):
    read(config, tmp_path)


def test_a_vocabulary_of_the_same_size_with_other_words_is_refused(tmp_path):
  # A word vocabulary's task.vocab_size is 0: only the fingerprint tells two
  # data dirs with as many words apart.
  from bpd_jax.tasks.text import vocab as vocab_lib
  trained = vocab_lib.WordVocabulary(['a', 'cat', 'sat'])
  other = vocab_lib.WordVocabulary(['a', 'sat', 'cat'])
  config = train_configs.demo_config()
  assert train(config, tmp_path) == []
  log, note = lines()
  workdir.check_vocabulary(trained, str(tmp_path), 'bpd_jax.main',
                           training=True, log=note)
  record = json.loads((tmp_path / 'config.json').read_text())
  assert record['vocabulary.fingerprint'] == trained.fingerprint
  assert record['vocabulary.size'] == 7
  # Config checks ignore the entries and keep them on a changed resume.
  changed = train_configs.demo_config()
  changed.train.base_steps += 1
  assert len(train(changed, tmp_path)) == 1
  assert read(config, tmp_path) == []
  workdir.check_vocabulary(trained, str(tmp_path), 'bpd_jax.evaluate',
                           training=False, log=note)
  assert log == []
  for training in (False, True):
    with pytest.raises(errors.WorkdirError) as error:
      workdir.check_vocabulary(other, str(tmp_path), 'bpd_jax.evaluate',
                               training=training, log=note)
    assert one_line(error) == (
        f'{tmp_path} was trained with another vocabulary: fingerprint '
        f'{trained.fingerprint} (7 ids, WordVocabulary) vs '
        f'{other.fingerprint} (7 ids, WordVocabulary) now. Give the task '
        f"the run's vocabulary (task.vocab_path) and its data.")


def test_a_record_without_a_fingerprint(tmp_path):
  from bpd_jax.tasks.text import vocab as vocab_lib
  words = vocab_lib.WordVocabulary(['a'])
  assert train(train_configs.demo_config(), tmp_path) == []
  log, note = lines()
  workdir.check_vocabulary(words, str(tmp_path), 'bpd_jax.evaluate',
                           training=False, log=note)
  assert log == [f'{tmp_path}/config.json records no vocabulary fingerprint, '
                 'so bpd_jax.evaluate does not check that its ids mean what '
                 'they meant in training.']
  workdir.check_vocabulary(words, str(tmp_path), 'bpd_jax.main',
                           training=True, log=note)
  assert len(log) == 1  # Training records it, silently.
  assert 'vocabulary.fingerprint' in json.loads(
      (tmp_path / 'config.json').read_text())


def test_a_warm_start_from_a_run_of_another_vocabulary_is_refused(tmp_path):
  from bpd_jax.tasks.text import vocab as vocab_lib
  trained = vocab_lib.WordVocabulary(['a', 'cat'])
  other = vocab_lib.WordVocabulary(['cat', 'a'])
  run = tmp_path / 'run'
  assert train(train_configs.demo_config(), run) == []
  workdir.check_vocabulary(trained, str(run), 'bpd_jax.main', training=True)
  workdir.check_warm_start_vocabulary(trained, str(run))
  with pytest.raises(errors.ConfigError) as error:
    workdir.check_warm_start_vocabulary(other, str(run))
  # A word vocabulary has no file: the advice is the run's task section.
  assert one_line(error) == (
      f'train.init_from={run} was trained with another vocabulary: '
      f'fingerprint {trained.fingerprint} (6 ids, WordVocabulary) vs '
      f'{other.fingerprint} (6 ids) of this task: give the task that run\'s '
      f'vocabulary (its WordVocabulary follows from the task section, task.* '
      f'in {run}/config.json).')
  (run / 'vocab.model').write_bytes(b'pieces')  # A SentencePiece run's.
  with pytest.raises(errors.ConfigError, match=r'that run\'s vocabulary '
                     rf'\(task.vocab_path={run}/vocab.model\)\.$'):
    workdir.check_warm_start_vocabulary(other, str(run))
  # A run of a model folder's tokenizer: the folder its task named.
  (tmp_path / 'heads').mkdir()
  (tmp_path / 'heads' / 'config.json').write_text(json.dumps({
      'vocabulary.fingerprint': trained.fingerprint, 'vocabulary.size': 6,
      'vocabulary.source': 'HFVocabulary', 'task.vocab_path': '/llama'}))
  with pytest.raises(errors.ConfigError, match=r'that run\'s vocabulary '
                     r'\(task.vocab_path=/llama\)\.$'):
    workdir.check_warm_start_vocabulary(other, str(tmp_path / 'heads'))
  # Folders without this project's record: a GPT-2 checkpoint's own
  # config.json, or none; their importers check the sizes.
  (tmp_path / 'gpt2').mkdir()
  (tmp_path / 'gpt2' / 'config.json').write_text('{"model_type": "gpt2"}')
  workdir.check_warm_start_vocabulary(other, str(tmp_path / 'gpt2'))
  workdir.check_warm_start_vocabulary(other, str(tmp_path / 'missing'))


def test_a_runs_vocabulary_is_its_own_or_the_one_it_was_started_with(
    tmp_path):
  base, heads, chained = (tmp_path / name for name in ('base', 'heads',
                                                       'chained'))
  for run in (base, heads, chained):
    run.mkdir()
  (base / 'vocab.model').write_bytes(b'pieces')
  # A run started from base's vocabulary records it and keeps no copy.
  (heads / 'config.json').write_text(json.dumps(
      {'vocabulary.source': str(base / 'vocab.model')}))
  assert workdir.run_vocabulary(str(base)) == str(base / 'vocab.model')
  assert workdir.run_vocabulary(str(heads)) == str(base / 'vocab.model')
  # Nothing to find (no file, no record, or a record of a file now gone):
  # the run's own path, which the task's loader reports missing.
  (chained / 'config.json').write_text(json.dumps(
      {'vocabulary.source': str(tmp_path / 'moved.model')}))
  for run in (chained, tmp_path / 'missing'):
    assert workdir.run_vocabulary(str(run)) == str(run / 'vocab.model')
