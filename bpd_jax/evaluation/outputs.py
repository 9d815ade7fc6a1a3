"""What the text and language-model reports write and print."""

import tabulate

from bpd_jax.infra import atomic_files


def save_json(path: str, result: dict, config) -> None:
  """The report `result`, with the config it ran, as JSON at `path`
  (atomically: a failed write leaves the previous report)."""
  atomic_files.write_json(path, dict(result, config=config.to_dict()),
                          indent=2)


def table(rows: list[dict], columns) -> str:
  """The rows' `columns` as a GitHub table, '-' where a value is None."""
  cells = [['-' if row[c] is None else row[c] for c in columns]
           for row in rows]
  return tabulate.tabulate(cells, headers=columns, tablefmt='github')
