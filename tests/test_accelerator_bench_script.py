"""scripts/accelerator_bench.sh: its checks before any bench starts (the
benches themselves are the bench job's, tested in test_bench_*)."""

import os
import subprocess

import pytest

from train_configs import ROOT

SCRIPT = os.path.join(ROOT, 'scripts', 'accelerator_bench.sh')


def run(*args):
  return subprocess.run(['bash', SCRIPT, *args], cwd=ROOT,
                        capture_output=True, text=True, timeout=60)


def test_usage():
  result = run('only_one')
  assert result.returncode == 2 and 'usage:' in result.stderr


def test_a_missing_corpus_or_base_run_is_named(tmp_path):
  result = run(str(tmp_path / 'nowhere'), str(tmp_path), str(tmp_path / 'o'))
  assert result.returncode == 2
  assert f'{tmp_path}/nowhere/val.en is missing' in result.stderr
  (tmp_path / 'data').mkdir()
  (tmp_path / 'data' / 'val.en').write_text('A dog.\n')
  result = run(str(tmp_path / 'data'), str(tmp_path / 'runs'),
               str(tmp_path / 'o'))
  assert result.returncode == 2
  assert f'{tmp_path}/runs/base/vocab.model is missing' in result.stderr
  assert not (tmp_path / 'o').exists()  # Nothing started.


def test_the_train_part_trains_what_runs_lacks_first(tmp_path):
  """PARTS=train needs no base run: it starts the main job for each run
  the trained part reads that RUNS lacks (a stand-in python records the
  calls: the jobs themselves are the training tests'), and stops, named,
  when the base left no vocabulary."""
  (tmp_path / 'data').mkdir()
  (tmp_path / 'data' / 'val.en').write_text('A dog.\n')
  runs = tmp_path / 'runs'
  (runs / 'ar_src_base_soft' / 'checkpoints').mkdir(parents=True)
  calls = tmp_path / 'calls'
  stand_in = tmp_path / 'bin' / 'python'
  stand_in.parent.mkdir()
  stand_in.write_text(f'#!/bin/bash\necho "$*" >> {calls}\n'
                      '[ "$1" = -c ] && echo 1\nexit ${JOB_STATUS:-0}\n')
  stand_in.chmod(0o755)

  def script(job_status):
    calls.write_text('')
    result = subprocess.run(
        ['bash', SCRIPT, str(tmp_path / 'data'), str(runs),
         str(tmp_path / 'o')], cwd=ROOT, capture_output=True, text=True,
        timeout=60, env={**os.environ, 'PARTS': 'train trained',
                         'QUICK': '1', 'JOB_STATUS': job_status,
                         'PATH': f'{stand_in.parent}:{os.environ["PATH"]}'})
    jobs = [line for line in calls.read_text().splitlines()
            if line.startswith('-m bpd_jax.main')]
    return result, jobs

  # A base job that ends badly (cut at TRAIN_TIMEOUT): no drafter on it.
  result, jobs = script('124')
  assert result.returncode == 1 and len(jobs) == 1, jobs
  result, jobs = script('0')
  assert result.returncode == 1
  assert f'{runs}/base/vocab.model is missing: the base did not train' in (
      result.stderr)
  assert len(jobs) == 2, jobs  # The draft layer's run is there already.
  assert f'--workdir={runs}/base ' in jobs[0]
  assert '--config.train.base_steps=60' in jobs[0]
  assert f'init_from={runs}/base,heads=block_corrected' in jobs[1]
  assert f'--workdir={runs}/m30k_blockc ' in jobs[1]
  assert 'in ' + str(runs) + ' already' in result.stdout


def fake_run(tmp_path):
  """A corpus and a base run that pass the script's checks (the benches
  themselves stop at the run's missing checkpoints)."""
  (tmp_path / 'data').mkdir()
  (tmp_path / 'data' / 'val.en').write_text('A dog.\n')
  (tmp_path / 'runs' / 'base').mkdir(parents=True)
  (tmp_path / 'runs' / 'base' / 'vocab.model').write_text('')
  return str(tmp_path / 'data'), str(tmp_path / 'runs')


@pytest.mark.slow
def test_the_sharded_part_needs_several_devices(tmp_path):
  """On one device the sharded part says it is skipped; on 8 simulated
  CPU devices it starts the bench with the mesh and the table (which,
  flags and config parsed, stops here at the fake run's missing
  checkpoints)."""
  data, runs = fake_run(tmp_path)
  logs = {}
  for devices in (1, 8):
    out = tmp_path / f'out{devices}'
    result = subprocess.run(
        ['bash', SCRIPT, data, runs, str(out)], cwd=ROOT, capture_output=True,
        text=True, timeout=120,
        env={**os.environ, 'PARTS': 'sharded', 'JAX_PLATFORMS': 'cpu',
             'XLA_FLAGS': f'--xla_force_host_platform_device_count={devices}'})
    assert result.returncode == 0, result.stderr
    logs[devices] = (out / 'bench.log').read_text()
  assert '== base_sharded: skipped, 1 device (it needs several)' in logs[1]
  assert 'Error' not in logs[1]
  assert '== base_sharded' in logs[8] and 'skipped' not in logs[8]
  assert f'no checkpoints in {runs}/base' in logs[8]


@pytest.mark.slow
def test_the_costs_part_measures_every_drafter(tmp_path):
  """PARTS=costs QUICK=1: scripts/drafter_costs.py at the tiny shape, its
  table written beside the log."""
  data, runs = fake_run(tmp_path)
  out = tmp_path / 'out'
  result = subprocess.run(
      ['bash', SCRIPT, data, runs, str(out)], cwd=ROOT, capture_output=True,
      text=True, timeout=900,
      env={**os.environ, 'PARTS': 'costs', 'QUICK': '1',
           'JAX_PLATFORMS': 'cpu'})
  assert result.returncode == 0, result.stderr
  log = (out / 'bench.log').read_text()
  assert '== drafter_costs' in log and 'exit 0' in log, log
  table = (out / 'drafter_costs' / 'drafter_costs.md').read_text()
  for drafter in ('independent', 'autoregressive', 'block',
                  'block_corrected'):
    assert f'| {drafter} ' in table
  assert 'T(16)/T(1)' in table
