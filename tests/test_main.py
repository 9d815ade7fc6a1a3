"""The command-line job, on a tiny config, in a subprocess as a user runs it."""

import json
import os
import re
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run_main(*flags):
  return subprocess.run(
      [sys.executable, '-m', 'bpd_jax.main', *flags], cwd=ROOT,
      capture_output=True, text=True, timeout=300,
      env={**os.environ, 'XLA_FLAGS': ''})


def test_demo_job_reports_identical_output(tmp_path):
  result = run_main('--config=configs/demo.py:size=tiny,batch=2',
                    f'--workdir={tmp_path}', '--config.decode.max_len=12',
                    '--config.decode.ks=(2,3)', '--config.decode.repeats=1')
  assert result.returncode == 0, result.stderr
  report = json.loads((tmp_path / 'decode_demo.json').read_text())
  rows = report['rows']
  assert [(row['decoder'], row['k']) for row in rows] == [
      ('greedy', 1), ('blockwise', 2), ('blockwise', 3)]
  assert all(row['identical_to_greedy'] == 1.0 for row in rows)
  assert '| decoder' in result.stdout


@pytest.mark.parametrize('flags,message', [
    (['--config.decode.ks=(2,9)'], r'k=9 must be an integer in \[1, 8\]'),
    (['--config.decode.criterion=top3'], "criterion 'top3' is not"),
    (['--config.model.dropout_rate=2.0'], 'dropout_rate=2.0 must be in'),
    (['--config.decode.beam=3'], 'beam'),
])
def test_bad_config_stops_with_a_message(tmp_path, flags, message):
  result = run_main('--config=configs/demo.py:size=tiny',
                    f'--workdir={tmp_path}', *flags)
  assert result.returncode != 0
  assert re.search(message, result.stderr), result.stderr
  assert not (tmp_path / 'decode_demo.json').exists()
