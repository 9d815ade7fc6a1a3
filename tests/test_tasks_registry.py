"""The task registry: names, kinds, checks, and loading through it."""

import ml_collections
import pytest

from bpd_jax import tasks


def test_every_task_is_registered_with_its_kind():
  kinds = {name: tasks.get(name).kind for name in tasks.NAMES}
  assert kinds == {'embedded': 'text', 'parallel_text': 'text',
                   'tfds_translation': 'text', 'embedded_images': 'image',
                   'tfds_images': 'image', 'python_source': 'lm',
                   'tfds_lm': 'lm'}
  with pytest.raises(ValueError, match=r"task.name='wmt' is not one of "
                     r"\('embedded', 'parallel_text'"):
    tasks.get('wmt')


def job_config(name):
  return ml_collections.ConfigDict(dict(task=dict(name=name)))


@pytest.mark.parametrize('job,message', [
    ('bench', "the bench times text and language-model tasks; task.name="
     "'embedded_images' is an image task: python -m bpd_jax.evaluate"),
    ('drafts', "the draft job analyses text and language-model tasks; "
     "task.name='embedded_images' is an image task."),
    ('distill', "distillation writes text and language-model corpora; "
     "task.name='embedded_images' is an image task."),
])
def test_require_kind_names_the_job(job, message):
  tasks.require_kind(job_config('embedded'), ('text',), job=job)
  with pytest.raises(ValueError) as error:
    tasks.require_kind(job_config('embedded_images'), ('text', 'lm'),
                       job=job)
  assert str(error.value).startswith(message)


def test_check_runs_the_task_own_checks():
  config = ml_collections.ConfigDict(dict(
      task=dict(name='embedded_images', high_res=16, low_res=5,
                sizes=dict(train=40), max_source_len=48, max_target_len=768),
      eval=dict(max_len=768, grid_examples=2), train=dict()))
  with pytest.raises(ValueError, match='task.high_res=16 must be a multiple'):
    tasks.check(config)
  config.task.low_res = 4
  tasks.check(config)
  config.task.max_target_len = 1
  with pytest.raises(ValueError, match='task.max_target_len=1 must be an '
                     'integer >= 2'):
    tasks.check(config)




def test_eval_split_is_checked_once_the_task_is_loaded():
  # A text task's split names come with its data (task.splits or the
  # dataset): eval.split='dev' used to stop the job after training.
  from bpd_jax.infra import errors
  from train_configs import tiny_config
  config = tiny_config()
  task = tasks.load_task(config.task, '/nonexistent')
  tasks.check_loaded(config, task)
  config.eval.split = 'dev'
  with pytest.raises(errors.ConfigError) as error:
    tasks.check_loaded(config, task)
  assert str(error.value) == ("eval.split='dev' is not a split of task "
                              "'embedded': one of ['train', 'validation'].")
