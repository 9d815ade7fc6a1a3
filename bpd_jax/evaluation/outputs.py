"""What every report writes and prints: its JSON, its table.

The text, language-model and super-resolution reports and the draft job
write through here, each file whole or not at all (`atomic_files`: a failed
write leaves the previous one).
"""

import os

import tabulate

from bpd_jax.infra import atomic_files


def save_json(path: str, result: dict, config) -> None:
  """The report `result`, with the config it ran, as JSON at `path`."""
  atomic_files.write_json(path, dict(result, config=config.to_dict()),
                          indent=2)


def write_rows(result: dict, config, workdir: str, columns, log,
               stem: str = 'eval') -> str:
  """Saves a report's `result` as WORKDIR/<stem>_<eval.split>.json and
  prints the `columns` of its rows; returns the JSON's path."""
  path = os.path.join(workdir, f'{stem}_{config.eval.split}.json')
  save_json(path, result, config)
  log(table(result['rows'], columns))
  return path


def table(rows: list[dict], columns, missing: str = '-') -> str:
  """The rows' `columns` as a GitHub table; `missing` where a row has no
  value (None, or no such key: the super-resolution report's bicubic row
  has no decoding figures)."""
  cells = [[missing if row.get(c) is None else row[c] for c in columns]
           for row in rows]
  return tabulate.tabulate(cells, headers=columns, tablefmt='github')


def save_table(path: str, rows: list[dict], columns,
               missing: str = '-') -> str:
  """Writes `table(rows, columns, missing)` to `path` (Markdown); returns
  it."""
  text = table(rows, columns, missing)
  atomic_files.write_text(path, text + '\n')
  return text
