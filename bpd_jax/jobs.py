"""What every absl entry point shares: its flags and its set-up.

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
(`distributed.initialize`), then the task is loaded and the model restored
from WORKDIR's latest checkpoint or built with the config's random weights
(`models/factory.py`). The training job asks for neither (it builds both
itself).
"""

import dataclasses
import os
from typing import Callable

from absl import app
from absl import flags
from ml_collections import config_flags

from bpd_jax import config_checks
from bpd_jax import console
from bpd_jax import distributed
from bpd_jax import tasks
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
    app.UsageError: extra arguments, a failed job check, or no checkpoint
      to restore.
    ValueError: a bad config field (config_checks).
  """
  console.setup()
  if len(argv) > 1:
    raise app.UsageError(f'Unexpected arguments: {argv[1:]}')
  config, workdir = CONFIG.value, WORKDIR.value
  config_checks.check(config)
  if init == 'checkpoint' and not os.path.isdir(
      os.path.join(workdir, 'checkpoints')):
    raise app.UsageError(
        f'no checkpoints in {workdir}: train first (python -m bpd_jax.main)'
        + (' or pass --init=random.' if random_hint else '.'))
  options = None
  if check is not None:
    try:
      options = check(config)
    except ValueError as error:
      raise app.UsageError(str(error)) from error
  distributed.initialize()
  if init is None:
    return Job(config, workdir, options=options)
  model, task = load(config, workdir, init)
  return Job(config, workdir, model, task, options)


def run(main: Callable[[list[str]], None], *required: str) -> None:
  """app.run(main) with --config, --workdir and `required` required."""
  flags.mark_flags_as_required(['config', 'workdir', *required])
  app.run(main)
