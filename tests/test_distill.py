"""Sequence-level distillation writes a corpus a config can train on."""

import pytest

from bpd_jax import distill
from bpd_jax import jobs
from bpd_jax import tasks
from bpd_jax import train

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
  counts = distill.distill(config, model, task, str(out), log=lambda _: None)
  sources = (out / 'train.src').read_text().splitlines()
  targets = (out / 'train.tgt').read_text().splitlines()
  assert len(sources) == len(targets) == counts['train'] > 0
  assert (out / 'validation.tgt').read_text().splitlines()[0] == (
      tasks.load_task(config.task, '').pairs('validation')[0][1])
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
    distill.distill(tiny_config(), None, None, str(tmp_path / 'out'),
                    batch_size=0)


def test_image_tasks_are_refused_before_any_work(tmp_path):
  config = train_configs.load_config('sr_demo', 'quick')
  with pytest.raises(ValueError, match="'embedded_images' is an image task"):
    distill.distill(config, None, None, str(tmp_path / 'out'))
  assert not (tmp_path / 'out').exists()
