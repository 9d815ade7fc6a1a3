"""A JSON object read from a file, each fault named in one line.

A model folder's config.json, generation_config.json and weight index are
read by the importers (`models/imports/reader.py`) and by the vocabulary
of its tokenizer (`tasks/text/hf_vocab.py`), which the layers keep apart:
both read through here.
"""

import json
import os

from bpd_jax.infra import errors


def read_object(path: str, optional: bool = False) -> dict:
  """The JSON object in the file at `path`.

  Args:
    path: the file.
    optional: where there is no such file, {} rather than an error.

  Raises:
    errors.MissingFileError: no such file (and not `optional`).
    errors.DataError: it cannot be read, is not UTF-8 JSON, or holds
      something other than an object.
  """
  if not os.path.exists(path):
    if optional:
      return {}
    raise errors.MissingFileError(f'{path} not found.')
  try:
    with open(path, encoding='utf-8') as f:
      value = json.load(f)
  except json.JSONDecodeError as e:
    raise errors.DataError(f'{path} is not JSON (line {e.lineno}, column '
                           f'{e.colno}: {e.msg}).') from None
  except UnicodeDecodeError as e:
    raise errors.DataError(f'{path} is not JSON: byte {e.object[e.start]:#04x} '
                           f'at offset {e.start} is not UTF-8.') from None
  except OSError as e:  # A folder of that name, no permission.
    raise errors.DataError(f'{path} cannot be read: {e.strerror}.') from None
  if not isinstance(value, dict):
    raise errors.DataError(f'{path} holds a {type(value).__name__}, not a '
                           f'JSON object.')
  return value
