"""What every absl entry point shares: its flags, its set-up, its errors.

    def main(argv):
      job = jobs.setup(argv, init='checkpoint')
      ...                            # job.config, job.workdir, job.model

    if __name__ == '__main__':
      jobs.run(main)

`setup` does, in this order, what no job may skip: the console set up (a
job's own progress lines, at once even through a pipe; library INFO logs
only with --verbosity, `console.py`), the config parsed by
`--config` is checked (`config_checks.check`: a bad field stops before any
work), the checkpoint to restore is looked for, the job's own checks run
(its flags, its config section), the processes of a multi-process run join
(`distributed.initialize`) and the mesh is checked against their devices,
the workdir is locked for this job and the config compared with the run's
(`workdir.py`), then the task is loaded and the model restored from
WORKDIR's latest intact checkpoint or built with the config's random
weights (`models/factory.py`); a run that starts from an imported
checkpoint (train.init_from, configs/hf_heads.py) and has no checkpoint
yet reads that checkpoint's base with new heads. The training job asks for
neither (it builds both itself).

`run` reports every `errors.JobError` (and absl's UsageError, a bad flag, a
--config file that gives no config, and a bad config override) as one line
on stderr, and exits with the error's status (2 for a usage error) without
a traceback; `--verbosity=1` shows the traceback too.
"""

import dataclasses
import difflib
import importlib.machinery
import importlib.util
import inspect
import os
import sys
from typing import Callable

import jax
from absl import app
from absl import flags
from ml_collections import config_flags

from bpd_jax import config_checks
from bpd_jax.infra import console
from bpd_jax.infra import distributed
from bpd_jax.infra import errors
from bpd_jax.infra import sharding
from bpd_jax.infra import workdir as workdir_lib
from bpd_jax.models import factory
from bpd_jax.models import imports
from bpd_jax.training import runs

CONFIG = config_flags.DEFINE_config_file(
    'config', None, 'Config file: a Python file with get_config(arg); '
    'options after a colon (FILE:key=value), fields overridden with '
    '--config.SECTION.FIELD=VALUE.')
WORKDIR = flags.DEFINE_string(
    'workdir', None, 'Directory of the run: checkpoints, vocabulary, '
    'reports.')

INITS = ('checkpoint', 'random')


def define_init() -> flags.FlagHolder:
  """The --init flag of the jobs that can measure an untrained model."""
  return flags.DEFINE_enum(
      'init', 'checkpoint', list(INITS),
      'Weights: the latest checkpoint in --workdir, or random (machinery '
      'and step costs only: random heads accept next to nothing).')


@dataclasses.dataclass(frozen=True)
class Job:
  """A job's set-up (see `setup`).

  Attributes:
    config: the checked config.
    workdir: --workdir.
    model: the Transformer (None unless `setup` was given `init`).
    task: the task of config.task (None unless `setup` was given `init`).
    options: what the job's `check` returned (e.g. its parsed flags).
  """
  config: object
  workdir: str
  model: object = None
  task: object = None
  options: object = None


def load(config, workdir: str, init: str = 'checkpoint'):
  """(model, task): the config's task and its model, restored or random.

  The run is opened as the training job opens it (`runs.open_run`: the
  task, its vocabulary compared with the run's, the special ids checked)
  before any weights are read.

  Args:
    config: a checked config.
    workdir: the run's directory: its vocabulary and checkpoints.
    init: 'checkpoint' (the latest in WORKDIR/checkpoints; where there is
      none, the base of an imported checkpoint train.init_from names, with
      new heads) or 'random' (the config's seeded random weights; a
      missing vocabulary is trained).

  The model is on JAX's default device, or in the host's memory where
  mesh.param_rules split it (`factory.build_place`): the caller lays it
  out (`evaluation.placement`, `generate.Decoder(mesh=, param_rules=)`).
  """
  if init not in INITS:
    raise ValueError(f'init={init!r} is not one of {INITS}.')
  task, _ = runs.open_run(config, workdir, job_name(), init)
  vocab_size = task.vocab.vocab_size
  with factory.build_place(config):  # The host's memory, if split later.
    if init == 'random':
      return factory.random_model(config, vocab_size), task
    if not _has_checkpoints(workdir) and _imported_base(config):
      print(f'No checkpoint in {workdir} yet: the model is the base of '
            f'train.init_from={config.train.init_from} with new, untrained '
            f'heads.', flush=True)
      return factory.warm_started_model(config, vocab_size), task
    return factory.restore_model(config, workdir, vocab_size), task


def _has_checkpoints(workdir: str) -> bool:
  return os.path.isdir(os.path.join(workdir, 'checkpoints'))


def _imported_base(config) -> bool:
  """Whether train.init_from names an imported checkpoint (a Hugging Face
  folder), whose base a job reads where the run has no checkpoint yet
  (configs/hf_heads.py: the distill job continues prompts with it)."""
  return bool(config.train.init_from) and imports.is_checkpoint(
      config.train.init_from)


def setup(argv, *, init: str | None = None,
          check: Callable[[object], object] | None = None,
          random_hint: bool = False) -> Job:
  """The set-up of a job, every step in order (see the module docstring).

  Args:
    argv: main's arguments; any beyond the program name are an error.
    init: None (no model: the training job), 'checkpoint' or 'random'.
    check: the job's own checks of the config and its flags, run after the
      config's and before any work; it raises app.UsageError or
      ValueError (reported as a usage error) and may return the job's
      options (`Job.options`).
    random_hint: the job has --init: a missing checkpoint's message says
      that --init=random needs none.

  Raises:
    app.UsageError: extra arguments, or a failed job check.
    errors.ConfigError: a bad config field (config_checks), or a mesh that
      needs more devices than there are.
    errors.MissingFileError: no checkpoint to restore.
    errors.WorkdirError: another job holds the workdir, the config differs
      from the run's where it matters, or the workdir cannot be written.
  """
  console.setup()
  if len(argv) > 1:
    raise app.UsageError(f'Unexpected arguments: {argv[1:]}')
  config, workdir = CONFIG.value, WORKDIR.value
  try:
    config_checks.check(config)
  except errors.JobError:
    raise
  except ValueError as error:
    raise errors.ConfigError(str(error)) from error
  if init == 'checkpoint' and not _has_checkpoints(workdir) and (
      not _imported_base(config)):
    raise errors.MissingFileError(
        f'no checkpoints in {workdir}: train first (python -m bpd_jax.main)'
        + (' or pass --init=random.' if random_hint else '.'))
  options = None
  if check is not None:
    try:
      options = check(config)
    except ValueError as error:
      raise app.UsageError(str(error)) from error
  distributed.initialize()
  _check_mesh(config)
  _hold_workdir(config, workdir, init)
  if init is None:
    return Job(config, workdir, options=options)
  model, task = load(config, workdir, init)
  return Job(config, workdir, model, task, options)


def _check_mesh(config) -> None:
  """Raises ConfigError unless the devices hold config.mesh.shape: known
  only once the processes have joined, so not a config check."""
  try:
    sharding.make_mesh(config.mesh.shape, config.mesh.axes)
  except ValueError as error:
    raise errors.ConfigError(str(error)) from error


_HELD: list[workdir_lib.Lock] = []  # Released when the job's main returns.


def _hold_workdir(config, workdir: str, init: str | None) -> None:
  """Locks the workdir (process 0) and compares the config with the run's.

  The training job (init None) records its config at the first start; a job
  that reads a checkpoint compares the architecture and vocabulary; a job
  on random weights has no run to compare with.
  """
  first = jax.process_index() == 0  # Final after distributed.initialize.
  lock_path = os.path.join(workdir, workdir_lib.LOCK_FILE)
  if first and all(lock.path != lock_path for lock in _HELD):
    _HELD.append(workdir_lib.Lock.acquire(workdir, job_name()))
  if init != 'random':
    workdir_lib.check_config(config, workdir, job_name(),
                             training=init is None, write=first)


def job_name() -> str:
  """This job as its command names it, e.g. 'bpd_jax.main'."""
  path = os.path.abspath(sys.argv[0])
  root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
  if not path.startswith(root + os.sep):
    return os.path.basename(path)
  module = os.path.relpath(path, root)[:-len('.py')].replace(os.sep, '.')
  return module.removesuffix('.__main__')


def run(main: Callable[[list[str]], None], *required: str) -> None:
  """app.run(main) with --config, --workdir and `required` required.

  A user error (see the module docstring) is one line and an exit status.
  """
  flags.mark_flags_as_required(['config', 'workdir', *required])
  app.run(_reporting_errors(main), flags_parser=_parse_flags)


def _reporting_errors(main):
  def reporting(argv):
    try:
      main(argv)
    except (errors.JobError, app.UsageError) as error:
      if _tracebacks(argv):
        raise
      _release_workdir()
      _exit(str(error), getattr(error, 'exit_code', 2))
    finally:
      _release_workdir()
  return reporting


def _release_workdir() -> None:
  while _HELD:
    _HELD.pop().release()


def _parse_flags(argv: list[str]) -> list[str]:
  """absl's flag parsing; its errors, a --config file that gives no config
  and a bad config override, each one line."""
  try:
    remaining = flags.FLAGS(argv)
  except (flags.Error, OSError, SyntaxError, AttributeError, KeyError,
          TypeError, ValueError) as error:
    if _tracebacks(argv):
      raise
    # The config file first: absl reports its errors as a flag error that
    # holds a traceback's text (or not at all: a SyntaxError).
    _exit(_config_file_error(_config_value(argv))
          or _flag_error(argv, error), 2)
  # ml_collections defers an OSError (a missing or unreadable config file,
  # a folder its get_config reads) until the config is first read (a
  # traceback in `setup`): named here.
  try:
    flags.FLAGS.config.get('seed')  # Any read of a deferred error raises it.
  except OSError as error:
    if _tracebacks(argv):
      raise
    _exit(_config_file_error(_config_value(argv)) or str(error), 2)
  return remaining


def _flag_error(argv: list[str], error: Exception) -> str:
  """The message of a failed parse whose config file is fine."""
  if isinstance(error, flags.Error):
    return f'{error} (--helpshort lists the flags).'
  # ml_collections applies --config.SECTION.FIELD=VALUE while parsing.
  return _override_error(argv, error)


def _config_value(argv: list[str]) -> str | None:
  """The --config value as the command gives it (--config=V or --config
  V; the last one counts, as for absl), or None."""
  value = None
  for i, arg in enumerate(argv[1:], 1):
    if arg.startswith('--config='):
      value = arg.split('=', 1)[1]
    elif arg == '--config' and i + 1 < len(argv):
      value = argv[i + 1]
  return value


def _config_file_error(value: str | None) -> str | None:
  """Why the --config value FILE[:OPTIONS] gives no config, in one line,
  or None where it gives one (or no --config was given)."""
  if value is None:
    return None
  try:
    _load_config_file(value)
  except ValueError as error:
    return str(error)
  return None


def _load_config_file(value: str):
  """The config of a --config value, built as ml_collections builds it:
  FILE's get_config(), or get_config(OPTIONS) for FILE:OPTIONS.

  Raises:
    ValueError: one line naming the value: FILE is missing or unreadable,
      is not Python, has no get_config taking these options, or its
      get_config refuses an option (`config_options.parse`: the option and
      the valid ones).
  """
  path, colon, options = value.partition(':')
  where = f'--config={value}'
  if not os.path.isfile(path):
    raise ValueError(f'{where}: ' + ('a directory, not a config file.'
                                     if os.path.isdir(path) else
                                     'no such file.'))
  # A loader by path, as ml_collections's: any file name is read as Python.
  loader = importlib.machinery.SourceFileLoader('_config_file', path)
  module = importlib.util.module_from_spec(
      importlib.util.spec_from_loader(loader.name, loader))
  try:
    loader.exec_module(module)
  except SyntaxError as error:
    raise ValueError(f'{where}: not a Python config file (line '
                     f'{error.lineno}: {error.msg}).') from error
  except OSError as error:
    raise ValueError(f'{where}: cannot be read: {error.strerror}.') from error
  get_config = getattr(module, 'get_config', None)
  if not callable(get_config):
    raise ValueError(f'{where}: not a config file: it defines no '
                     f'get_config(arg).')
  arguments = (options,) if colon else ()
  try:
    inspect.signature(get_config).bind(*arguments)
  except TypeError:
    raise ValueError(f'{where}: its get_config takes '
                     + ('no options after a colon.' if colon else
                        'options: FILE:OPTIONS.')) from None
  try:
    return get_config(*arguments)
  except (ValueError, OSError) as error:  # A bad option or a missing file,
    # named by the config itself.
    raise ValueError(f'{where}: {str(error).strip().splitlines()[0]}'
                     ) from error


def _override_error(argv: list[str], error: Exception) -> str:
  """What a failed config override names: the field, its section, the
  closest valid names (or the parser's own message)."""
  overrides = [a[2:].split('=', 1)[0] for a in argv[1:]
               if a.startswith('--config.')]
  config = _config_without_overrides(_config_value(argv))
  for override in overrides if config is not None else ():
    node, where = config, 'the config'
    for key in override.split('.')[1:]:
      if not hasattr(node, 'keys'):
        return f'--{override}: {where} is a value, not a section.'
      if key not in node:
        close = difflib.get_close_matches(key, list(node.keys()), n=3,
                                          cutoff=0.5)
        hint = (f'closest: {", ".join(close)}' if close else
                f'its fields: {", ".join(sorted(node.keys()))}')
        named = where if where == 'the config' else f'section {where}'
        return f'--{override}: {named} has no field {key!r}; {hint}.'
      node, where = node[key], f'{where.removeprefix("the config")}.{key}'
      where = where.lstrip('.')
  first_line = str(error).strip().strip('"\'').split('\n')[0]
  return f'a config override failed: {type(error).__name__}: {first_line}'


def _config_without_overrides(value: str | None):
  """The config of the --config value (`_load_config_file`), or None if
  there is none or it fails."""
  if value is None:
    return None
  try:
    return _load_config_file(value)
  except Exception:  # The file itself fails: the parser's message says how.
    return None


def _tracebacks(argv: list[str]) -> bool:
  """Whether --verbosity=1 (or more) asks for tracebacks."""
  if flags.FLAGS.is_parsed():
    return flags.FLAGS.verbosity >= 1
  for arg in argv:
    for prefix in ('--verbosity=', '-v='):
      if arg.startswith(prefix):
        value = arg[len(prefix):]
        return value.lstrip('-').isdigit() and int(value) >= 1
  return False


def _exit(message: str, status: int) -> None:
  """Prints `message` on stderr and ends the process at once.

  os._exit skips the interpreter's shutdown, during which background
  threads of a failed job (Orbax's writers) would print hundreds of lines.
  """
  sys.stdout.flush()
  print(f'Error: {message}', file=sys.stderr, flush=True)
  os._exit(status)
