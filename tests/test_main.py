"""The command-line jobs, in subprocesses, as a user runs them."""

import json
import os
import re
import subprocess
import sys

import pytest

import xla_flags

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# The paper's heads (the draft job's refinements need them), two phases.
TINY = ['--config=configs/demo.py:quick,heads=independent',
        '--config.train.tokens_per_batch=0',
        '--config.model.d_model=32',
        '--config.model.d_ff=64', '--config.model.num_proposal_heads=3',
        '--config.model.head_hidden=32', '--config.train.base_steps=10',
        '--config.train.head_steps=6', '--config.train.log_every=5',
        '--config.eval.num_examples=6', '--config.eval.ks=(2,3)']


def run(module, *flags):
  return subprocess.run(
      [sys.executable, '-m', f'bpd_jax.{module}', *flags], cwd=ROOT,
      capture_output=True, text=True, timeout=600,
      # One device; compiled fast as in the test process.
      env={**os.environ, 'XLA_FLAGS': xla_flags.COMPILE_FAST})


def train_and_evaluate(workdir):
  """Trains TINY into workdir, then evaluates it with the evaluation job."""
  result = run('main', *TINY, f'--workdir={workdir}')
  assert result.returncode == 0, result.stderr[-3000:]
  assert 'Phase \'heads\': steps 10..16' in result.stdout
  assert '| decoder' in result.stdout
  report = json.loads((workdir / 'eval_validation.json').read_text())
  assert [r['decoder'] for r in report['rows']] == [
      'greedy', 'blockwise k=2', 'blockwise k=3']
  assert all(r['identical_to_greedy'] == 1.0 for r in report['rows'])
  evaluated = run('evaluate', *TINY, f'--workdir={workdir}')
  assert evaluated.returncode == 0, evaluated.stderr[-3000:]
  assert f'Restored step 16 from {workdir}/checkpoints.' in evaluated.stdout
  assert 'blockwise k=3' in evaluated.stdout


def test_train_and_evaluate(tmp_path):
  train_and_evaluate(tmp_path)


# Slow: a resume in-process by default (tests/test_training_train.py), and
# the distillation job's refusal too (tests/test_distillation.py).
@pytest.mark.slow
def test_rerun_resumes_at_the_end_and_distill_keeps_its_input(tmp_path):
  train_and_evaluate(tmp_path)
  # Rerun on the same workdir: resumes at the end, trains nothing more.
  again = run('main', *TINY, f'--workdir={tmp_path}',
              '--config.eval.after_training=false')
  assert again.returncode == 0, again.stderr[-3000:]
  assert 'Resumed from step 16' in again.stdout
  assert 'step ' not in again.stdout.replace('Resumed from step', '')
  # The distillation job checks its output directory before any decoding.
  refused = run('distill', *TINY, f'--workdir={tmp_path}',
                f'--output_dir={tmp_path}')
  assert refused.returncode == 2, refused.stderr[-3000:]
  assert 'which this job reads' in refused.stderr


# Other config errors, and their one-line output: test_jobs.py.
@pytest.mark.parametrize('flags,message', [
    (['--config.eval.ks=(2,9)'], r'k=9 must be an integer in \[1, 8\]'),
    (['--config=configs/demo.py:fast'], "unknown config option 'fast'"),
])
def test_bad_config_stops_before_any_work(tmp_path, flags, message):
  result = run('main', '--config=configs/demo.py', f'--workdir={tmp_path}',
               *flags)
  assert result.returncode != 0
  assert re.search(message, result.stderr), result.stderr[-2000:]
  assert not (tmp_path / 'checkpoints').exists()
