"""The benchmark job, in a subprocess, as a user runs it."""

import json
import os
import subprocess
import sys

import pytest

import xla_flags
from test_main import ROOT, TINY, run


@pytest.mark.slow
def test_quick_bench_of_a_random_model(tmp_path):
  result = run('bench', *TINY, f'--workdir={tmp_path}', '--init=random',
               '--quick', '--examples=4', '--calibration_examples=4',
               '--batch_sizes=1,2')
  assert result.returncode == 0, result.stderr[-3000:]
  report = json.loads((tmp_path / 'bench' / 'bench.json').read_text())
  assert report['examples'] == 4 and report['init'] == 'random'
  settings = [(r['batch_size'], r['decoder'], r['k']) for r in report['rows']]
  assert settings[:3] == [(1, 'greedy', 1), (1, 'blockwise', 2),
                          (1, 'blockwise', 3)]
  assert len(settings) == 8 and settings[4][:2] == (2, 'greedy')
  assert all(r['recompiles'] == 0 for r in report['rows'])
  assert (tmp_path / 'bench' / 'bench.png').exists()
  assert '| decoder' in (tmp_path / 'bench' / 'bench.md').read_text()


@pytest.mark.slow
def test_quick_bench_on_split_parameters_with_the_sharding_table(tmp_path):
  """mesh.param_rules='tensor' on (2, 4) of 8 simulated devices: the sweep
  and k='auto''s tuning (3 sources: repeated to split over 'data') decode
  on split parameters, and --sharding_table adds a row per rule set."""
  result = subprocess.run(
      [sys.executable, '-m', 'bpd_jax.bench', *TINY,
       f'--workdir={tmp_path}', '--init=random', '--quick', '--examples=4',
       '--calibration_examples=3', '--batch_sizes=2', '--sharding_table',
       '--config.mesh.shape=(2,4)', "--config.mesh.axes=('data','model')",
       '--config.mesh.param_rules=tensor', '--config.eval.batch_size=2'],
      cwd=ROOT, capture_output=True, text=True, timeout=600,
      env={**os.environ, 'XLA_FLAGS': '--xla_force_host_platform_device_'
           'count=8 ' + xla_flags.COMPILE_FAST})
  assert result.returncode == 0, result.stderr[-3000:]
  report = json.loads((tmp_path / 'bench' / 'bench.json').read_text())
  assert [r['decoder'] for r in report['rows']] == [
      'greedy', 'blockwise', 'blockwise', 'auto']
  for row in report['rows']:  # Exact: greedy's output but for near-ties.
    assert row['differences'] == row['near_tie_differences']
    assert row['recompiles'] == 0
  rules = [row['rules'] for row in report['sharding']]
  assert rules == ['replicated', 'tensor', 'fsdp']
  assert report['sharding'][1]['params_vs_replicated'] < 0.5
  assert '| rules ' in (tmp_path / 'bench' / 'bench.md').read_text()
  assert '| rules ' in result.stdout


def test_checkpoint_needed_unless_random(tmp_path):
  result = run('bench', *TINY, f'--workdir={tmp_path}', '--quick')
  assert result.returncode != 0
  assert 'no checkpoints in' in result.stderr


def test_bad_flags_stop_before_work(tmp_path):
  result = run('bench', *TINY, f'--workdir={tmp_path}', '--init=random',
               '--ks=2,7')
  assert result.returncode != 0
  assert "exceed the model's 3 heads" in result.stderr
  result = run('bench', *TINY, f'--workdir={tmp_path}', '--init=random',
               '--criteria=exact,top3')
  assert result.returncode != 0
  assert "criterion 'top3'" in result.stderr


def test_tree_sizes_are_checked_with_the_flags_before_tuning(tmp_path):
  result = run('bench', *TINY, f'--workdir={tmp_path}', '--init=random',
               '--tree_sizes=16,100000000')
  assert result.returncode == 2
  assert 'Tuning' not in result.stdout
  assert ('--tree_sizes: tree sizes [100000000]: a tree of the top 4 of 2 '
          'heads has 2 to 21 nodes.') in result.stderr
  assert 'Traceback' not in result.stderr


def test_image_tasks_are_refused_with_a_pointer(tmp_path):
  result = run('bench', '--config=configs/sr_demo.py:quick',
               f'--workdir={tmp_path}', '--init=random')
  assert result.returncode != 0
  assert 'is an image task: python -m bpd_jax.evaluate' in result.stderr
