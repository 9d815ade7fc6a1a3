"""Sequence-level distillation writes a corpus a config can train on."""

import errno
import json

import pytest

from bpd_jax import distillation
from bpd_jax import jobs
from bpd_jax import tasks
from bpd_jax.infra import errors
from bpd_jax.training import train

import train_configs
from train_configs import demo_config, tiny_config


@pytest.mark.slow
def test_distilled_corpus_trains(tmp_path):
  # Long enough that most translations are not empty (empty ones are left
  # out: a parallel corpus has no empty lines).
  config = tiny_config(train=dict(base_steps=60, head_steps=0,
                                  learning_rate=5e-3))
  train.train(config, str(tmp_path / 'base'), log=lambda _: None)
  out = tmp_path / 'distilled'
  model, task = jobs.load(config, str(tmp_path / 'base'))
  counts = distillation.distill(config, model, task, str(out),
                                log=lambda _: None)
  sources = (out / 'train.src').read_text().splitlines()
  targets = (out / 'train.tgt').read_text().splitlines()
  assert len(sources) == len(targets) == counts['train'] > 0
  info = json.loads((out / 'distilled.json').read_text())
  assert info['vocab_fingerprint'] == task.vocab.fingerprint
  assert info['examples'] == counts
  assert (out / 'validation.tgt').read_text().splitlines()[0] == (
      tasks.load_task(config.task, '').pairs('validation')[0][1])
  # With the parameters split over a (2, 4) mesh: the same corpus.
  split = tiny_config(train=dict(config.train),
                      mesh=dict(shape=(2, 4), axes=('data', 'model'),
                                param_rules='tensor'))
  distillation.distill(split, model, task, str(tmp_path / 'split'),
                       log=lambda _: None)
  assert ((tmp_path / 'split' / 'train.tgt').read_text() ==
          (out / 'train.tgt').read_text())
  # The demo config's distilled option reads it back.
  distilled = demo_config(f'distilled={out}')
  config.task = distilled.task
  task = tasks.load_task(config.task, str(tmp_path / 'student'))
  assert len(task.pairs('train')) == counts['train']
  config.train.base_steps = 2
  student, _ = train.train(config, str(tmp_path / 'student'),
                           log=lambda _: None)
  assert student.config.vocab_size == task.vocab.vocab_size


def test_bad_batch_size(tmp_path):
  with pytest.raises(ValueError, match='--batch_size=0 must be >= 1'):
    distillation.distill(tiny_config(), None, None, str(tmp_path / 'out'),
                    batch_size=0)


def test_image_tasks_are_refused_before_any_work(tmp_path):
  config = train_configs.load_config('sr_demo', 'quick')
  with pytest.raises(ValueError, match="'embedded_images' is an image task"):
    distillation.distill(config, None, None, str(tmp_path / 'out'))
  assert not (tmp_path / 'out').exists()


def test_the_output_dir_is_never_an_input_and_must_be_new_or_empty(tmp_path):
  corpus, workdir = tmp_path / 'corpus', tmp_path / 'run'
  config = demo_config(f'quick,distilled={corpus}')
  # Distilling a corpus into itself used to empty it.
  for output, named in ((corpus, 'task.data_dir'), (workdir, '--workdir'),
                        (tmp_path / 'run' / '.', '--workdir')):
    with pytest.raises(errors.DataError) as error:
      distillation.check_output_dir(config, str(workdir), str(output),
                                    overwrite=True)
    read = corpus if named[0] == 't' else workdir
    assert str(error.value) == (
        f'--output_dir={output} is {named} ({read}),'
        f' which this job reads: distilling into it would overwrite its own '
        f'input. Give another directory.')
  out = tmp_path / 'out'
  check = lambda directory, overwrite: distillation.check_output_dir(
      config, str(workdir), str(directory), overwrite=overwrite)
  check(out, overwrite=False)
  out.mkdir()
  check(out, overwrite=False)
  (out / 'train.src').write_text('a\n')
  with pytest.raises(errors.WorkdirError,
                     match=r'already holds 1 file\(s\) \(train.src\): give a '
                     'new or empty directory, or --overwrite'):
    check(out, overwrite=False)
  check(out, overwrite=True)
  with pytest.raises(errors.WorkdirError, match='is a file'):
    check(out / 'train.src', overwrite=True)


def test_a_model_that_ends_every_sentence_at_once_writes_no_corpus(tmp_path):
  config = tiny_config()  # Random weights: eos first, every time.
  model, task = jobs.load(config, str(tmp_path / 'run'), init='random')
  with pytest.raises(errors.DataError, match='all 400 translations are '
                     'empty .* no corpus was written'):
    distillation.distill(config, model, task, str(tmp_path / 'out'),
                    log=lambda _: None)
  assert not (tmp_path / 'out').exists()


def test_a_corpus_is_replaced_whole_or_not_at_all(tmp_path, monkeypatch):
  out = tmp_path / 'corpus'

  def write(target):
    corpus = {'train': [('a b', target)], 'validation': [('c', 'd')]}
    distillation._write_text_corpus(str(out), corpus, dict(source='run'))

  write('x y')
  written = {p.name: p.read_bytes() for p in out.iterdir()}
  assert set(written) == {'train.src', 'train.tgt', 'validation.src',
                          'validation.tgt', 'distilled.json'}
  assert written['train.tgt'] == b'x y\n'
  # The disk fills up at the last file: every file is the old one.
  def full_disk(*args, **kwargs):
    raise OSError(errno.ENOSPC, 'No space left on device')

  monkeypatch.setattr(distillation.json, 'dump', full_disk)
  with pytest.raises(errors.WriteError) as error:
    write('new')
  assert str(error.value) == (
      'writing train.src, train.tgt, validation.src, validation.tgt, '
      f'distilled.json in {out} failed: No space left on device (errno 28); '
      'the previous files are intact.')
  monkeypatch.undo()
  assert {p.name: p.read_bytes() for p in out.iterdir()} == written
