"""Errors a job reports in one line: what the user gave, or what it met.

An absl job (`jobs.run`) prints a `JobError` as one line on stderr and exits
with its `exit_code`, without a traceback (`--verbosity=1` shows it). Every
other exception is a bug and keeps its traceback.

Each class also derives from the built-in error a library caller would
catch for it (a bad value is a ValueError, a missing file a
FileNotFoundError), so code that calls the library directly needs nothing
from this module.
"""


class JobError(Exception):
  """A reason to stop that the message names in full."""
  exit_code = 2  # A usage error: the command, its config or its files.


class ConfigError(JobError, ValueError):
  """A config field is out of range, unknown, or contradicts another."""


class DataError(JobError, ValueError):
  """A data file cannot be used as it is (encoding, alignment, empty)."""


class MissingFileError(JobError, FileNotFoundError):
  """A file or directory the job needs is not there."""


class WorkdirError(JobError, RuntimeError):
  """The workdir is held by another job, belongs to another config, or
  cannot be written."""


class CheckpointError(JobError, RuntimeError):
  """No checkpoint step of a directory can be read back intact."""


class SaveError(JobError, OSError):
  """A checkpoint could not be written (disk full, no permission)."""
  exit_code = 1  # Not the command's fault: the machine's.


class WriteError(JobError, OSError):
  """A file could not be written whole (disk full, file too large, no
  permission): the previous file is left as it was (`atomic_files.py`)."""
  exit_code = 1  # Not the command's fault: the machine's.


class MissingPackageError(JobError, ImportError):
  """A package of an extra the job needs is not installed (`extras.py`)."""


class ProcessError(JobError, RuntimeError):
  """Another process of a several-process job failed or stopped before
  making what this one waits for (`distributed.made_once`)."""
  exit_code = 1  # Process 0's own error says whose fault it is.
