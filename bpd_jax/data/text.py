"""Plain-text parallel corpora: one sentence a line, aligned by line number."""

import os


def read_parallel(source_path: str, target_path: str,
                  limit: int | None = None) -> list[tuple[str, str]]:
  """(source, target) sentence pairs from two aligned files.

  Args:
    source_path: one source sentence a line (UTF-8).
    target_path: the target sentences, line by line.
    limit: read at most this many pairs (None: all).

  Raises:
    FileNotFoundError: a file is missing.
    ValueError: the files differ in line count, or a line is empty.
  """
  for path in (source_path, target_path):
    if not os.path.isfile(path):
      raise FileNotFoundError(f'parallel corpus file {path} not found.')
  with open(source_path, encoding='utf-8') as f:
    sources = f.read().splitlines()
  with open(target_path, encoding='utf-8') as f:
    targets = f.read().splitlines()
  if len(sources) != len(targets):
    raise ValueError(f'{source_path} has {len(sources)} lines but '
                     f'{target_path} has {len(targets)}.')
  pairs = [(s.strip(), t.strip()) for s, t in zip(sources, targets)]
  for i, (source, target) in enumerate(pairs):
    if not source or not target:
      raise ValueError(f'line {i + 1} of {source_path if not source else target_path} '
                       f'is empty.')
  return pairs[:limit] if limit is not None else pairs
