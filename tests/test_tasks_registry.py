"""The task registry: names, kinds, checks, and loading through it."""

import json

import ml_collections
import pytest

from bpd_jax import tasks
from bpd_jax.infra import workdir


def test_every_task_is_registered_with_its_kind():
  kinds = {name: tasks.get(name).kind for name in tasks.NAMES}
  assert kinds == {'embedded': 'text', 'parallel_text': 'text',
                   'tfds_translation': 'text', 'embedded_images': 'image',
                   'tfds_images': 'image', 'python_source': 'lm',
                   'text_files': 'lm', 'jsonl_prompts': 'lm',
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


def image_config(**task_fields):
  """An embedded_images config without the section's optional fields,
  locked as a job's --config is."""
  config = ml_collections.ConfigDict(dict(
      task=dict(name='embedded_images', high_res=8, low_res=4,
                sizes=dict(train=40), max_source_len=48, max_target_len=192,
                **task_fields),
      eval=dict(max_len=192, grid_examples=2, split='validation'),
      train=dict()))
  config.lock()
  return config


def test_check_and_load_fill_in_the_missing_defaults():
  defaults = tasks.get('embedded_images').defaults
  assert {'scales', 'seed', 'targets', 'reference'} <= set(defaults)
  config = image_config(seed=3)
  tasks.check(config)
  assert {field: config.task[field] for field in defaults} == {
      **defaults, 'seed': 3}
  section = image_config().task
  task = tasks.load_task(section, '/nonexistent')
  assert section.scales == defaults['scales'] and task.vocab.targets == (
      'intensities')
  with pytest.raises(AttributeError):
    section.seeds = 1  # Still locked: a typo is no new field.


def test_every_default_is_what_a_record_without_it_compares_as():
  """A run recorded before a default was filled in compares as if it
  held the default (infra/workdir.py ADDED_FIELDS, as config.json writes
  it: a tuple as a list)."""
  for name in tasks.NAMES:
    for field, value in tasks.get(name).defaults.items():
      assert workdir.ADDED_FIELDS[f'task.{field}'] == json.loads(
          json.dumps(value)), (name, field)


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


def test_each_kind_of_task_follows_the_task_protocol():
  from bpd_jax.tasks.images import task as image_task
  from bpd_jax.tasks.lm import task as lm_task
  from bpd_jax.tasks.text import task as text_task
  from bpd_jax.tasks.text import vocab as vocab_lib
  words = vocab_lib.WordVocabulary(['a', 'b'])
  text = text_task.TextTask(words, {'train': [('a', 'b')]})
  image = image_task.ImageTask((4, 4, 3), (2, 2, 3), {})
  plain_lm = lm_task.LMTask(words, {}, eval_prompt_len=2, train_prompt_len=0)
  prompted_lm = lm_task.LMTask(words, {}, eval_prompt_len=2,
                               train_prompt_len=5)
  for task in (text, image, plain_lm):
    assert isinstance(task, tasks.Task)
    assert isinstance(task.vocab, tasks.spec.Vocab)
  assert isinstance(text, tasks.TextualTask)
  assert isinstance(plain_lm, tasks.TextualTask)
  assert not isinstance(image, tasks.TextualTask)  # No text to serve.
  # Training sources: the task section's width, but none for plain
  # language modelling and the prompt width of a prompted LM task.
  assert [t.train_source_len(7) for t in (text, image, plain_lm,
                                          prompted_lm)] == [7, 7, 0, 5]
