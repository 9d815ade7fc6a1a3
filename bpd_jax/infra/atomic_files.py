"""Files written whole or not at all: a temporary file, then a rename.

A report, corpus or vocabulary written in place is truncated first: a full
disk or a kill midway leaves neither the previous file nor a new one (an
eval_validation.json of invalid JSON, a 0-line train.tgt). Every file a job
writes goes through here instead: it is written under a temporary name in
its own directory (a rename is atomic only within one file system), flushed
to disk, then `os.replace`d over its path. A failed write removes the
temporary file and raises `errors.WriteError`, one line naming the file and
the reason; the previous file is left as it was.

    atomic_files.write_json(path, report, indent=2)
    with atomic_files.replacing(path) as temp:  # A writer that takes a path.
      figure.savefig(temp)
    with atomic_files.replacing_all([src, tgt]) as temps:  # Files that
      ...                                                  # belong together.
"""

import contextlib
import json
import os
import secrets
from typing import Iterator, Sequence

from bpd_jax.infra import errors

# Marks a file being written: '.NAME.<random>.partial.EXT' beside NAME.EXT.
PARTIAL = '.partial'


def write_bytes(path: str, data: bytes) -> None:
  """Writes `data` as the whole content of `path`."""
  with replacing(path) as temp:
    with open(temp, 'wb') as f:
      f.write(data)


def write_text(path: str, text: str) -> None:
  """Writes `text` (UTF-8) as the whole content of `path`."""
  write_bytes(path, text.encode('utf-8'))


def write_json(path: str, value, indent: int | None = None) -> None:
  """Writes `value` as JSON at `path` (serialised before any file is
  touched: a value JSON cannot hold fails with the old file untouched)."""
  write_text(path, json.dumps(value, indent=indent))


@contextlib.contextmanager
def replacing(path: str) -> Iterator[str]:
  """Yields a temporary path to write `path`'s new content to.

  The temporary name ends with `path`'s extension, so writers that choose
  a format by it (matplotlib's savefig, np.savez) behave as for `path`.
  When the block ends, the file is flushed to disk and renamed over
  `path`; an OSError in the block (keep only the writing in it) or in the
  rename removes it and raises errors.WriteError.
  """
  with replacing_all([path]) as (temp,):
    yield temp


@contextlib.contextmanager
def replacing_all(paths: Sequence[str]) -> Iterator[list[str]]:
  """Yields a temporary path for each of `paths` (see `replacing`).

  The files are renamed only once every one is written and on disk, so a
  failure or a kill while writing (a full disk, the usual case) leaves all
  the previous files, never a mix of old and new (a corpus's sources
  beside another's targets). The renames that follow are each atomic; only
  a kill in the microseconds between two of them leaves some files new.
  """
  existed = [os.path.exists(path) for path in paths]
  temps = []
  try:
    try:
      for path in paths:
        os.makedirs(os.path.dirname(path) or '.', exist_ok=True)
        temps.append(_temporary_name(path))
      yield temps
      for temp, path, was in zip(temps, paths, existed):
        _flush_to_disk(temp, path if was else None)
      for temp, path in zip(temps, paths):
        os.replace(temp, path)
    except errors.JobError:
      raise  # A nested write's own one-line error (WriteError is an OSError).
    except OSError as error:
      raise _write_error(error, paths, temps, any(existed)) from error
  finally:
    for temp in temps:
      with contextlib.suppress(FileNotFoundError):
        os.remove(temp)  # Not there once renamed.
  for directory in {os.path.dirname(path) or '.' for path in paths}:
    _sync_directory(directory)


def _temporary_name(path: str) -> str:
  """'.NAME.<random>.partial.EXT' in `path`'s directory: hidden, unique
  (two jobs never write one temporary file), the extension last."""
  directory, name = os.path.split(path)
  stem, extension = os.path.splitext(name)
  return os.path.join(directory, f'.{stem}.{secrets.token_hex(4)}'
                                 f'{PARTIAL}{extension}')


def _flush_to_disk(temp: str, previous: str | None) -> None:
  """fsyncs `temp`, with the previous file's permissions if there was one
  (as writing over it in place would keep them)."""
  if previous is not None:
    os.chmod(temp, os.stat(previous).st_mode & 0o7777)
  fd = os.open(temp, os.O_RDONLY)
  try:
    os.fsync(fd)
  finally:
    os.close(fd)


def _sync_directory(directory: str) -> None:
  """Puts the renames on disk too, where the file system allows it.

  The files are in place by now: a directory that cannot be fsynced (some
  network file systems refuse) is no failed write.
  """
  with contextlib.suppress(OSError):
    fd = os.open(directory, os.O_RDONLY)
    try:
      os.fsync(fd)
    finally:
      os.close(fd)


def _write_error(error: OSError, paths, temps, existed: bool
                 ) -> errors.WriteError:
  """The one-line error: the file that failed (all of them when the
  writer does not say which), the reason, what was left."""
  failed = [path for path, temp in zip(paths, temps)
            if error.filename in (path, temp)]
  if failed or len(paths) == 1:
    what = (failed or paths)[0]
  else:
    what = (', '.join(os.path.basename(p) for p in paths) + ' in '
            + (os.path.dirname(paths[0]) or '.'))
  reason = (f'{error.strerror} (errno {error.errno})' if error.strerror
            else str(error) or type(error).__name__)
  if not existed:
    left = 'nothing was written there'
  elif len(paths) == 1:
    left = 'the previous file is intact'
  else:
    left = 'the previous files are intact'
  written = errors.WriteError(f'writing {what} failed: {reason}; {left}.')
  written.errno = error.errno
  return written
