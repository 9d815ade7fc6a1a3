"""Opening a run: its task and its model's config, checked against the
workdir before any weights are read or any step runs.

The training job (`train.train`) and every job that reads a run
(`jobs.load`: evaluate, bench, drafts, distill) open it here, so that each
takes the same steps in the same order. From Python, `load_run(workdir)`
opens a trained run from its workdir alone: the config its record holds,
its vocabulary, its latest checkpoint.
"""

import dataclasses
import os

import jax
import ml_collections

from bpd_jax import tasks
from bpd_jax.infra import checkpoints as checkpoints_lib
from bpd_jax.infra import errors
from bpd_jax.infra import json_files
from bpd_jax.infra import workdir as workdir_lib
from bpd_jax.models import factory
from bpd_jax.models import Transformer
from bpd_jax.tasks.text import hf_vocab
from bpd_jax.tasks.text import vocab as vocab_lib


def open_run(config, workdir: str, job: str, init: str | None, log=print):
  """(task, model config) of the run in `workdir`, checked.

  In order: the task is loaded (a missing vocabulary trained, except by a
  job that reads a checkpoint: that vocabulary is the run's), checked
  against the config (`tasks.check_loaded`), its vocabulary compared with
  the run's record (the training job records it at the first start, and
  compares a warm start's too), and the model config built from the
  config and the vocabulary's size, its special ids checked against the
  vocabulary's (`factory.check_special_ids`).

  Args:
    config: a checked config.
    workdir: the run's directory: its vocabulary and config record.
    job: the job as its command names it (e.g. 'bpd_jax.main'), for the
      record's messages.
    init: None (the training job), 'checkpoint' (a job that reads the
      run's weights) or 'random' (random weights: no run to compare with).
    log: takes the one-line notes (a record without a vocabulary).

  Raises:
    errors.MissingFileError: a data file or a checkpoint reader's
      vocabulary is missing.
    errors.DataError: the task cannot be loaded from its data.
    errors.WorkdirError: the vocabulary is not the run's (or the warm
      start's), or the record cannot be read or written.
    errors.ConfigError: the config's special ids are not the vocabulary's.
  """
  task = tasks.load_task(config.task, workdir,
                         train_vocab=init != 'checkpoint')
  tasks.check_loaded(config, task)
  training = init is None
  if init != 'random':  # Random weights have no run to compare with.
    workdir_lib.check_vocabulary(task.vocab, workdir, job, training=training,
                                 log=log, write=jax.process_index() == 0)
  if training and config.train.init_from:
    workdir_lib.check_warm_start_vocabulary(task.vocab,
                                            config.train.init_from)
  model_config = factory.model_config_from(config, task.vocab.vocab_size)
  factory.check_special_ids(model_config, task.vocab)  # Before any weights.
  return task, model_config


@dataclasses.dataclass(frozen=True)
class Run:
  """A trained run, as `load_run` opens it.

  Attributes:
    model: the Transformer with the checkpoint's parameters (its trained
      heads; a frozen imported base read from its folder).
    vocab: the vocabulary the run's task encoded with (`encode`,
      `decode`, the special ids): an imported model's tokenizer, or the
      run's SentencePiece or word vocabulary.
    config: the config the run was trained with (its workdir's record),
      as a ConfigDict.
    step: the checkpoint step restored.
  """
  model: Transformer
  vocab: object
  config: ml_collections.ConfigDict
  step: int


def load_run(workdir: str, base_folder: str | None = None,
             log=print) -> Run:
  """The run in `workdir`, from the workdir alone: no config file needed.

  The config is the one the training job recorded (WORKDIR/config.json);
  the vocabulary that of its task (an imported model's tokenizer from the
  model folder, a SentencePiece model from the workdir; another task's
  from its data), checked against the fingerprint recorded; the model
  that config's, with the parameters of the newest intact checkpoint.
  Relative paths in the record are read from the current directory.

  Args:
    workdir: the run's directory.
    base_folder: the imported model's folder where it has moved since the
      run trained (its weights must be those the heads were trained on:
      their fingerprint is checked); None: where the run found it.
    log: takes the one-line notes (an older step used for a damaged
      newer one, a record without a vocabulary fingerprint).

  Raises:
    errors.MissingFileError: no such folder, no config record or
      checkpoint in it, or the model folder is gone.
    errors.WorkdirError: the record cannot be read, or the vocabulary is
      not the run's.
    errors.CheckpointError: no checkpoint reads back intact.
    factory.BaseChanged: the model folder holds other weights than the
      heads were trained on.
  """
  for name, value in (('workdir', workdir), ('base_folder', base_folder)):
    if not (isinstance(value, (str, os.PathLike))
            or name == 'base_folder' and value is None):
      raise ValueError(f'load_run: {name}={value!r} is not a path.')
  if not os.path.isdir(workdir):
    raise errors.MissingFileError(f'no run in {workdir}: no such folder.')
  config = recorded_config(workdir)
  checkpoints = os.path.join(workdir, 'checkpoints')
  if not os.path.isdir(checkpoints):
    raise errors.MissingFileError(
        f'no checkpoint in {workdir}: train first (python -m bpd_jax.main '
        f'--workdir={workdir}).')
  try:  # A record that lacks a field every run records: not a run's.
    folder = base_folder or _model_folder(config, checkpoints, log)
    vocab = _vocabulary(config, workdir, folder)
    workdir_lib.check_vocabulary(vocab, workdir, 'bpd_jax.load_run',
                                 training=False, log=log, write=False)
    model_config = factory.model_config_from(config, vocab.vocab_size)
  except (AttributeError, KeyError) as error:
    field = str(error).strip('\'"')
    if _holds_field(config, field):
      raise  # The record has it: a fault of the code, not of the record.
    raise errors.WorkdirError(
        f'{os.path.join(workdir, workdir_lib.CONFIG_FILE)} lacks the field '
        f"'{field}', which every training run records: not the record of a "
        f'run.') from None
  factory.check_special_ids(model_config, vocab)
  with factory.build_place(config):
    model, step = factory.restore(config, workdir, vocab.vocab_size,
                                  base_folder=base_folder)
  return Run(model, vocab, config, step)


def recorded_config(workdir: str) -> ml_collections.ConfigDict:
  """The config a run was trained with, from WORKDIR/config.json.

  The record's dotted fields nest again into sections; lists are tuples
  again (JSON wrote the configs' tuples as lists); a model or train field
  the record predates takes the value that did what the run did
  (`workdir.ADDED_FIELDS`).

  Raises:
    errors.MissingFileError: the workdir has no record.
    errors.WorkdirError: the record cannot be read.
  """
  path = os.path.join(workdir, workdir_lib.CONFIG_FILE)
  if not os.path.isfile(path):
    raise errors.MissingFileError(
        f'{workdir} holds no {workdir_lib.CONFIG_FILE}: not the workdir of '
        f'a training run (the training job records its config there).')
  try:
    record = json_files.read_object(path)
  except errors.DataError as error:
    raise errors.WorkdirError(str(error)) from None
  fields = {name: value for name, value in record.items()
            if name not in workdir_lib.VOCABULARY_FIELDS}
  for name, value in workdir_lib.ADDED_FIELDS.items():
    present = name in fields or any(f.startswith(name + '.') for f in fields)
    if name.split('.')[0] in ('model', 'train') and not present:
      fields[name] = value
  nested = {}
  for name, value in sorted(fields.items()):
    *sections, key = name.split('.')
    node = nested
    for section in sections:
      node = node.setdefault(section, {})
    node[key] = _tuples(value)
  return ml_collections.ConfigDict(nested)


def _holds_field(config, field: str) -> bool:
  """Whether any section of `config` (nested ConfigDicts) has `field`."""
  if not isinstance(config, ml_collections.ConfigDict):
    return False
  return field in config or any(_holds_field(value, field)
                                for value in config.values())


def _tuples(value):
  """`value` with JSON's lists made tuples again, nested ones too."""
  if isinstance(value, list):
    return tuple(_tuples(item) for item in value)
  return value


def _model_folder(config, checkpoints: str, log) -> str:
  """Where the run's imported model is: the folder its latest checkpoint
  records (absolute: a frozen imported base), else train.init_from (as
  recorded, perhaps relative); the first that is there."""
  store = checkpoints_lib.Checkpoints(checkpoints, log=log, read_only=True)
  try:
    step = store.latest_step()
    record = store.meta(step) if step is not None else {}
  except checkpoints_lib.Damaged:
    record = {}  # The restore says which step it reads instead.
  finally:
    store.close()
  recorded = record.get(factory.BASE_RECORD, {}).get('folder')
  candidates = [f for f in (recorded, config.train.init_from) if f]
  return next((f for f in candidates if os.path.isdir(f)),
              candidates[0] if candidates else '')


def _vocabulary(config, workdir: str, folder: str):
  """The vocabulary of the run's task, read without its data where the
  run's files hold it: an imported model's tokenizer (from `folder` when
  the task reads the model folder's), the run's SentencePiece model; else
  the task's own (loaded with its data)."""
  task = config.task
  if task.get('vocab_type') == 'hf':
    path = task.vocab_path
    if path == config.train.init_from and folder:
      path = folder  # The model folder, moved with it.
    if not os.path.isdir(path):
      relative = ('' if os.path.isabs(path) else
                  f'; a relative path is read from the current directory, '
                  f'{os.getcwd()}')
      raise errors.MissingFileError(
          f'the run in {workdir} reads the tokenizer of the model folder '
          f'{path}, which is not there (moved{relative}): pass the folder '
          f'as load_run\'s base_folder.')
    return hf_vocab.HFVocabulary(path)
  model = workdir_lib.run_vocabulary(workdir)
  if task.get('vocab_type', 'sentencepiece') == 'sentencepiece' and (
      os.path.isfile(model)):
    return vocab_lib.SentencePieceVocabulary(model)
  return tasks.load_task(task, workdir, train_vocab=False).vocab
