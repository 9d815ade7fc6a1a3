"""What reports write and print: JSON with the config, GitHub tables."""

import json

import ml_collections

from bpd_jax.evaluation import outputs

ROWS = [dict(decoder='bicubic', psnr=20.5),
        dict(decoder='greedy', mean_block=1.0, psnr=None)]


def cells(line):
  return [cell.strip() for cell in line.split('|')[1:-1]]


def test_a_table_marks_missing_and_none_values():
  lines = outputs.table(ROWS, ('decoder', 'mean_block', 'psnr')).splitlines()
  assert cells(lines[0]) == ['decoder', 'mean_block', 'psnr']
  assert cells(lines[2]) == ['bicubic', '-', '20.5']
  assert cells(lines[3]) == ['greedy', '1.0', '-']
  blank = outputs.table(ROWS, ('decoder', 'psnr'), missing='').splitlines()
  assert cells(blank[3]) == ['greedy', '']


def test_a_report_is_saved_with_its_config_and_its_table_printed(tmp_path):
  config = ml_collections.ConfigDict(dict(eval=dict(split='test')))
  printed = []
  path = outputs.write_rows(dict(rows=ROWS, examples=2), config,
                            str(tmp_path), ('decoder',), printed.append,
                            stem='sr')
  assert path == str(tmp_path / 'sr_test.json')
  assert json.loads((tmp_path / 'sr_test.json').read_text()) == dict(
      rows=ROWS, examples=2, config=config.to_dict())
  assert printed == [outputs.table(ROWS, ('decoder',))]
  table = outputs.save_table(str(tmp_path / 'rows.md'), ROWS, ('decoder',))
  assert (tmp_path / 'rows.md').read_text() == table + '\n'
