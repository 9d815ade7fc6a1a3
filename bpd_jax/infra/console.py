"""What a job prints: its own progress, not its libraries' internals.

Every absl entry point calls `setup()` first (through `jobs.setup`). Without it a
user sees Orbax's INFO lines (a ~2,000-character CheckpointManagerOptions
dump, the handler registry) and JAX's backend search before the job's first
progress line, and sees no progress line at all while stdout is a file or
a pipe (Python block-buffers it there).
"""

import logging as std_logging
import os
import sys

from absl import flags
from absl import logging

_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep
_ORBAX_DIR = f'{os.sep}orbax{os.sep}checkpoint{os.sep}'


class _OwnInfoOnly(std_logging.Filter):
  """Passes this package's records, and other modules' warnings and errors.

  Orbax's errors are the exception: a failed save or read logs its
  traceback from each of several threads (over a thousand lines for one
  full disk), and `checkpoints.py` reports every such failure itself, in
  one line naming the step.
  """

  def filter(self, record: std_logging.LogRecord) -> bool:
    path = os.path.abspath(record.pathname)
    if path.startswith(_PACKAGE_DIR):
      return True
    if _ORBAX_DIR in path:
      return record.levelno >= std_logging.CRITICAL
    return record.levelno >= std_logging.WARNING


_FILTER = _OwnInfoOnly()


def setup() -> None:
  """Sets up the console of a job; call it first in main(), after app.run.

  - stdout becomes line-buffered: each progress line appears as it is
    printed, also when stdout is a file or a pipe (`| tee log`).
  - Unless `--verbosity` (or `-v`) is given on the command line, absl's
    handler drops INFO (and debug) records of every module outside
    bpd_jax: the libraries' warnings and errors (but Orbax's, which the
    job reports itself), and the job's own logs, stay. `--verbosity=0`
    brings them all back.
  Calling it again changes nothing.
  """
  sys.stdout.reconfigure(line_buffering=True)
  if not flags.FLAGS['verbosity'].present:
    logging.get_absl_handler().addFilter(_FILTER)
