"""Tasks: the registry of named data sources, each owning its check and loader.

A config's `task.name` picks one of the registered tasks; each task module
declares a `spec.TaskSpec` (name, kind, check, loader) and documents the
task section it reads:

  'embedded'          text   text/embedded.py: the built-in generated
                             translation task (no download).
  'parallel_text'     text   text/parallel_text.py: aligned plain-text
                             files (Multi30k, a distilled corpus).
  'tfds_translation'  text   text/tfds_translation.py: a TFDS translation
                             dataset (WMT14 En->De).
  'embedded_images'   image  images/embedded_photos.py: super-resolution on
                             crops of photos shipped with the packages.
  'tfds_images'       image  images/tfds_images.py: super-resolution on a
                             TFDS image dataset (CelebA).
  'python_source'     lm     lm/python_source.py: a code language model on
                             the Python standard library (no download).
  'text_files'        lm     lm/text_files.py: language modelling on a
                             folder of text or code files.
  'jsonl_prompts'     lm     lm/jsonl_prompts.py: prompts from a JSONL
                             file, continued by the model itself.
  'tfds_lm'           lm     lm/tfds_lm.py: language modelling,
                             summarisation or question answering on a TFDS
                             dataset (LM1B, CNN/DailyMail, XSum, SQuAD).

Every task section also has max_source_len and max_target_len (>= 2); the
optional fields of a task's section have their defaults in its TaskSpec
(`defaults`), filled in by `check` and `load_task` before anything reads
the section. A loaded task follows the `Task` protocol (spec.py: vocab,
splits, encoded(split), train_examples(process_index, process_count),
train_source_len(max_source_len), sources(split, max_len)); a text task
(text.task.TextTask) and a language-model task (lm.task.LMTask: prompt ->
continuation, for decoder-only models) also follow `TextualTask`
(pairs(split), a text vocabulary); an image task is an
images.task.ImageTask. Shared by all kinds: batching.py (training and
evaluation batches), host_shards.py (each process's share of a split),
checks.py (the config checks' helpers), tfds_builders.py. Each task's
vocabulary names its special ids (pad_id, eos_id, bos_id, stop_ids: the
project's own 0, 1, 2, an imported checkpoint's its own), which the task
and batching pad, end and start with.

This module is the package's public API: no module outside bpd_jax/tasks/
tests a task's name; it asks `get(name).kind` or `require_kind`.
A vocabulary is trained only by the training job; the evaluate and distill
jobs find it in the workdir (or task.vocab_path) or stop with an error.
"""

from bpd_jax.infra import errors
from bpd_jax.tasks.checks import at_least, eval_split
from bpd_jax.tasks.images import embedded_photos
from bpd_jax.tasks.images import tfds_images
from bpd_jax.tasks.lm import jsonl_prompts
from bpd_jax.tasks.lm import python_source
from bpd_jax.tasks.lm import task as lm_task
from bpd_jax.tasks.lm import text_files
from bpd_jax.tasks.lm import tfds_lm
from bpd_jax.tasks.spec import Task, TaskSpec, TextualTask
from bpd_jax.tasks.text import embedded
from bpd_jax.tasks.text import parallel_text
from bpd_jax.tasks.text import tfds_translation

_SPECS = {spec.name: spec for spec in (
    embedded.SPEC, parallel_text.SPEC, tfds_translation.SPEC,
    embedded_photos.SPEC, tfds_images.SPEC, python_source.SPEC,
    text_files.SPEC, jsonl_prompts.SPEC, tfds_lm.SPEC)}
NAMES = tuple(_SPECS)

__all__ = ['NAMES', 'Task', 'TaskSpec', 'TextualTask', 'check',
           'check_loaded', 'check_model', 'get', 'load_task', 'require_kind']

# What each job that needs some kinds of task does, for its refusal message.
_JOBS = {
    'bench': ('the bench times text and language-model tasks',
              ': python -m bpd_jax.evaluate reports its time per image and '
              'speedups'),
    'drafts': ('the draft job analyses text and language-model tasks', ''),
    'distill': ('distillation writes text and language-model corpora', ''),
}


_KIND_NAMES = {'text': 'a text task', 'image': 'an image task',
               'lm': 'a language-model task'}


def get(name: str) -> TaskSpec:
  """The registered task `name`.

  Raises:
    ValueError: no such task (the message lists the names).
  """
  if name not in _SPECS:
    raise ValueError(f'task.name={name!r} is not one of {NAMES}.')
  return _SPECS[name]


def _completed(section) -> TaskSpec:
  """The task of a `task` section, its missing fields filled in from the
  task's defaults: the one place they are filled in (`check` and
  `load_task` both come through here, so a bare section is completed
  too)."""
  spec = get(section.name)
  spec.fill_defaults(section)
  return spec


def load_task(config, workdir: str, train_vocab: bool = True) -> Task:
  """The task a config's `task` section describes.

  Args:
    config: the `task` ConfigDict: name, and the fields its module documents
      (the optional ones it lacks are filled in from the task's defaults).
    workdir: where a trained vocabulary is saved (and found on resume), and
      preprocessed TFDS data cached (WORKDIR/data/).
    train_vocab: train a missing SentencePiece vocabulary, or fit a missing
      image reference filter (the training job); False: a missing one is
      an error (evaluation, distillation).

  Returns:
    A text.task.TextTask, images.task.ImageTask or lm.task.LMTask.

  Raises:
    errors.MissingFileError: a data file, TFDS data dir or vocabulary is
      missing.
    errors.DataError: a bad name, field, split or vocabulary type, or a data
      file that cannot be used (the message names the file, and the line).
  """
  try:
    return _completed(config).load(config, workdir, train_vocab=train_vocab)
  except errors.JobError:
    raise
  except FileNotFoundError as error:
    raise errors.MissingFileError(str(error)) from error
  except ValueError as error:  # UnicodeError too: a file is not text.
    raise errors.DataError(str(error)) from error


def check_loaded(config, task: Task) -> None:
  """What a config can be checked for only with its task loaded (a data
  dir's or a dataset's split names): eval.split is one of the task's.

  Raises:
    errors.ConfigError: naming the field and the task's splits.
  """
  try:
    eval_split(config, task.splits)
  except ValueError as error:
    raise errors.ConfigError(str(error)) from error


def check(config) -> None:
  """The task's own checks of a whole config; ValueError names a bad field.

  The task's name, max lengths (>= 2), and what its module checks: its task
  section and the fields of other sections it constrains (e.g. the
  super-resolution report's eval fields, token-count batches for WMT).
  The task section's missing optional fields are filled in first (its
  task's defaults), so a run's record holds them.
  """
  spec = _completed(config.task)
  at_least(config.task, 'task', max_source_len=2, max_target_len=2)
  spec.check(config)


def check_model(config, model) -> None:
  """What the task needs of its model, as the model factory resolves it
  (the model section's fields over its size's: a size's encoder depth is
  known there alone): a language-model task's is decoder-only.

  Args:
    config: the whole config.
    model: its model section resolved (models/factory.py
      `model_config_from`), e.g. a TransformerConfig.

  Raises:
    ValueError: naming the field.
  """
  if get(config.task.name).kind == 'lm':
    lm_task.check_decoder_only(config.task.name, model.num_encoder_layers)


def require_kind(config, kinds: tuple[str, ...], job: str) -> None:
  """Raises ValueError unless the config's task is of one of `kinds`.

  Args:
    config: the whole config.
    kinds: e.g. ('text', 'lm').
    job: the job that asks ('bench', 'drafts', 'distill'), named with what
      it does in the message.
  """
  name = config.task.name
  actual = get(name).kind
  if actual not in kinds:
    does, hint = _JOBS[job]
    raise ValueError(f'{does}; task.name={name!r} is {_KIND_NAMES[actual]}'
                     f'{hint}.')
