"""Benchmark outputs: JSON with every column, Markdown table, PNG plot."""

import json

import ml_collections
import pytest

from bpd_jax.bench import report
from bpd_jax.bench import runner


def row(decoder, k, batch_size, speedup, **extra):
  values = {column: 0 for column in runner.COLUMNS}
  values.update(decoder=decoder, k=k, criterion='exact', min_block=1,
                batch_size=batch_size, speedup=speedup,
                mean_accepted_block=float(k), **extra)
  return values


ROWS = [row('greedy', 1, 1, 1.0), row('blockwise', 2, 1, 1.4),
        row('blockwise', 4, 1, 1.9), row('auto', 4, 1, 1.9),
        row('greedy', 1, 8, 1.0), row('blockwise', 2, 8, 0.9),
        row('auto', 1, 8, 1.0)]


def test_writes_json_markdown_and_plot(tmp_path):
  paths = report.write(ROWS, dict(examples=3), str(tmp_path / 'out'))
  written = json.loads(open(paths['json']).read())
  assert written['examples'] == 3 and written['rows'] == ROWS
  table = open(paths['markdown']).read()
  assert table.splitlines()[0].startswith('|   batch_size | decoder')
  assert len(table.splitlines()) == 2 + len(ROWS)
  with open(paths['plot'], 'rb') as f:
    assert f.read(8) == b'\x89PNG\r\n\x1a\n'


def test_rows_missing_columns(tmp_path):
  with pytest.raises(ValueError, match='rows lack columns'):
    report.write([dict(decoder='greedy')], {}, str(tmp_path))


def test_meta_names_the_run():
  config = ml_collections.ConfigDict(dict(eval=dict(split='validation',
                                                    max_len=12)))
  meta = report.meta(config, '/runs/x', init='random', examples=4,
                     repeats=2, seconds=7.6)
  assert (meta['split'], meta['max_len'], meta['examples'], meta['repeats'],
          meta['seconds'], meta['init']) == ('validation', 12, 4, 2, 8,
                                             'random')
  assert meta['config'] == config.to_dict() and meta['devices'] >= 1
