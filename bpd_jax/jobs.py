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
(`distributed.initialize`), the workdir is locked for this job and the
config compared with the run's (`workdir.py`), then the task is loaded and
the model restored from WORKDIR's latest intact checkpoint or built with
the config's random weights (`models/factory.py`). The training job asks
for neither (it builds both itself).

`run` reports every `errors.JobError` (and absl's UsageError, and a bad
flag or config override) as one line on stderr, and exits with the error's
status (2 for a usage error) without a traceback; `--verbosity=1` shows the
traceback too.
"""

import dataclasses
import difflib
import importlib.util
import os
import sys
from typing import Callable

import jax
from absl import app
from absl import flags
from ml_collections import config_flags

from bpd_jax import config_checks
from bpd_jax import console
from bpd_jax import distributed
from bpd_jax import errors
from bpd_jax import tasks
from bpd_jax import workdir as workdir_lib
from bpd_jax.models import factory

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

  Args:
    config: a checked config.
    workdir: the run's directory: its vocabulary and checkpoints.
    init: 'checkpoint' (the latest in WORKDIR/checkpoints) or 'random' (the
      config's seeded random weights; a missing vocabulary is trained).
  """
  if init not in INITS:
    raise ValueError(f'init={init!r} is not one of {INITS}.')
  task = tasks.load_task(config.task, workdir,
                         train_vocab=init == 'random')
  if init != 'random':  # Random weights have no run to compare with.
    workdir_lib.check_vocabulary(task.vocab, workdir, job_name(),
                                 training=False)
  vocab_size = task.vocab.vocab_size
  if init == 'random':
    return factory.random_model(config, vocab_size), task
  return factory.restore_model(config, workdir, vocab_size), task


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
    errors.ConfigError: a bad config field (config_checks).
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
  if init == 'checkpoint' and not os.path.isdir(
      os.path.join(workdir, 'checkpoints')):
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
  _hold_workdir(config, workdir, init)
  if init is None:
    return Job(config, workdir, options=options)
  model, task = load(config, workdir, init)
  return Job(config, workdir, model, task, options)


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
  """absl's flag parsing, its errors (and a bad config override) one line."""
  try:
    return flags.FLAGS(argv)
  except flags.Error as error:
    if _tracebacks(argv):
      raise
    _exit(f'{error} (--helpshort lists the flags).', 2)
  except (AttributeError, KeyError, TypeError, ValueError) as error:
    # ml_collections applies --config.SECTION.FIELD=VALUE while parsing.
    if _tracebacks(argv):
      raise
    _exit(_override_error(argv, error), 2)


def _override_error(argv: list[str], error: Exception) -> str:
  """What a failed config override names: the field, its section, the
  closest valid names (or the parser's own message)."""
  overrides = [a[2:].split('=', 1)[0] for a in argv[1:]
               if a.startswith('--config.')]
  config = _config_without_overrides(argv)
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


def _config_without_overrides(argv: list[str]):
  """The --config file's config as ml_collections builds it (its
  get_config, given the options after a colon), or None if that fails."""
  value = next((a.split('=', 1)[1] for a in argv
                if a.startswith('--config=')), None)
  if value is None:
    return None
  path, _, options = value.partition(':')
  try:
    spec = importlib.util.spec_from_file_location('_config_file', path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.get_config(options) if options else module.get_config()
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
