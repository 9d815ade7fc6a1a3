"""Files written whole or not at all, on real file-system faults."""

import contextlib
import json
import os
import resource

import numpy as np
import pytest

from bpd_jax.infra import atomic_files
from bpd_jax.infra import errors


@contextlib.contextmanager
def disk_full_past(size: int):
  """Files of this process may not grow past `size` bytes while the block
  runs. Python ignores SIGXFSZ, so a write past it fails with EFBIG, as a
  full disk's fails with ENOSPC."""
  soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
  resource.setrlimit(resource.RLIMIT_FSIZE, (size, hard))
  try:
    yield
  finally:
    resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))


def names(directory) -> list[str]:
  return sorted(p.name for p in directory.iterdir())


def test_writes_and_replaces_keeping_the_files_permissions(tmp_path):
  path = tmp_path / 'sub' / 'report.json'
  atomic_files.write_json(str(path), {'a': 1}, indent=2)
  assert json.loads(path.read_text()) == {'a': 1}
  os.chmod(path, 0o600)
  atomic_files.write_text(str(path), 'new\n')
  assert path.read_text() == 'new\n'
  assert path.stat().st_mode & 0o777 == 0o600
  assert names(path.parent) == ['report.json']  # No temporary file left.


def test_a_full_disk_leaves_the_previous_file_and_says_so_in_one_line(
    tmp_path):
  path = tmp_path / 'eval_validation.json'
  atomic_files.write_json(str(path), {'rows': [1, 2]})
  previous = path.read_bytes()
  with disk_full_past(1_000), pytest.raises(errors.WriteError) as error:
    atomic_files.write_json(str(path), {'rows': list(range(1_000))})
  assert str(error.value) == (f'writing {path} failed: File too large '
                              '(errno 27); the previous file is intact.')
  assert error.value.exit_code == 1  # The machine's fault, not the command's.
  assert path.read_bytes() == previous
  assert names(tmp_path) == ['eval_validation.json']
  # A new file: nothing is left where it was to be.
  with disk_full_past(1_000), pytest.raises(
      errors.WriteError, match='nothing was written there'):
    atomic_files.write_text(str(tmp_path / 'new.md'), 'x' * 2_000)
  assert names(tmp_path) == ['eval_validation.json']


def test_a_value_json_cannot_hold_touches_no_file(tmp_path):
  path = tmp_path / 'report.json'
  path.write_text('{"old": true}')
  with pytest.raises(TypeError):
    atomic_files.write_json(str(path), {'bad': object()})
  assert path.read_text() == '{"old": true}'
  assert names(tmp_path) == ['report.json']


def test_files_that_belong_together_are_all_old_or_all_new(tmp_path):
  paths = [str(tmp_path / 'train.src'), str(tmp_path / 'train.tgt')]
  for path, text in zip(paths, ('a\n', 'b\n')):
    atomic_files.write_text(path, text)
  with disk_full_past(1_000), pytest.raises(errors.WriteError) as error:
    with atomic_files.replacing_all(paths) as temps:
      for temp, lines in zip(temps, (1, 1_000)):  # The second fills the disk.
        with open(temp, 'w') as f:
          f.write('y\n' * lines)
  assert str(error.value).endswith('; the previous files are intact.')
  assert [open(p).read() for p in paths] == ['a\n', 'b\n']
  assert names(tmp_path) == ['train.src', 'train.tgt']


def test_a_temporary_name_keeps_the_extension_writers_choose_by(tmp_path):
  path = tmp_path / 'cache.npz'
  with atomic_files.replacing(str(path)) as temp:
    assert temp.endswith('.partial.npz') and os.path.dirname(temp) == str(
        tmp_path)
    np.savez(temp, a=np.arange(3))  # np.savez adds .npz to other names.
  with np.load(path) as arrays:
    np.testing.assert_array_equal(arrays['a'], [0, 1, 2])
  assert names(tmp_path) == ['cache.npz']
