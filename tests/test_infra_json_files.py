"""A JSON object read from a file: each fault one line naming the file."""

import pytest

from bpd_jax.infra import errors
from bpd_jax.infra import json_files


def test_an_object_is_read_and_an_optional_missing_file_is_empty(tmp_path):
  path = tmp_path / 'config.json'
  path.write_text('{"vocab_size": 300}', encoding='utf-8')
  assert json_files.read_object(str(path)) == {'vocab_size': 300}
  missing = str(tmp_path / 'generation_config.json')
  assert json_files.read_object(missing, optional=True) == {}
  with pytest.raises(errors.MissingFileError,
                     match='generation_config.json not found'):
    json_files.read_object(missing)


@pytest.mark.parametrize('content, message', [
    (b'{"a": }', r'is not JSON \(line 1, column 7: Expecting value\)'),
    (b'{"a": "\xff"}', r'is not JSON: byte 0xff at offset 7 is not UTF-8'),
    (b'[1, 2]', 'holds a list, not a JSON object'),
])
def test_a_broken_file_is_one_line_naming_it(tmp_path, content, message):
  path = tmp_path / 'config.json'
  path.write_bytes(content)
  with pytest.raises(errors.DataError, match=message) as raised:
    json_files.read_object(str(path), optional=True)
  assert str(raised.value).startswith(str(path))
  assert '\n' not in str(raised.value)


def test_a_folder_is_not_a_file(tmp_path):
  (tmp_path / 'config.json').mkdir()
  with pytest.raises(errors.DataError, match='config.json cannot be read'):
    json_files.read_object(str(tmp_path / 'config.json'))
