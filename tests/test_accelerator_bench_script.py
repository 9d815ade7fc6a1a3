"""scripts/accelerator_bench.sh: its checks before any bench starts (the
benches themselves are the bench job's, tested in test_bench_*)."""

import os
import subprocess

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
