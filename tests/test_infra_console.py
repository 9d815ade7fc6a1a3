"""The jobs' console: progress lines through a pipe at once, no library INFO."""

import logging
import os
import select
import subprocess
import sys

from bpd_jax.infra import console

_REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# A job in miniature: an absl app that logs as a library would (this script
# lies outside bpd_jax), prints a progress line, then waits for its stdin
# to close: the line must reach the pipe before the process exits.
_JOB = """
import sys
from absl import app, logging
from bpd_jax.infra import console

def main(argv):
  console.setup()
  logging.info('library info line')
  logging.warning('library warning line')
  print('step 1/2 | progress')
  sys.stdin.read()

app.run(main)
"""


def _record(pathname, level):
  return logging.LogRecord('absl', level, pathname, 1, 'message', None, None)


def test_filter_keeps_own_records_and_library_warnings():
  own = os.path.join(os.path.dirname(console.__file__), 'train.py')
  library = os.path.join(os.path.dirname(logging.__file__), 'orbax.py')
  keep = console._FILTER.filter
  assert keep(_record(own, logging.INFO))
  assert not keep(_record(library, logging.INFO))
  assert not keep(_record(library, logging.DEBUG))
  assert keep(_record(library, logging.WARNING))
  assert keep(_record(library, logging.ERROR))
  # Orbax's failures are reported by checkpoints.py, one line each.
  orbax = os.path.join(os.path.dirname(logging.__file__), 'orbax',
                       'checkpoint', 'future.py')
  assert not keep(_record(orbax, logging.ERROR))
  assert not keep(_record(orbax, logging.WARNING))
  assert keep(_record(orbax, logging.CRITICAL))


def _run_job(*flags):
  """(first stdout line read while the job still runs, the job's stderr)."""
  env = dict(os.environ, PYTHONPATH=_REPO)
  env.pop('PYTHONUNBUFFERED', None)  # It would unbuffer stdout by itself.
  job = subprocess.Popen(
      [sys.executable, '-c', _JOB, *flags], cwd=_REPO, text=True,
      stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
      env=env)
  try:
    ready, _, _ = select.select([job.stdout], [], [], 30)
    line = job.stdout.readline() if ready else ''
  finally:
    _, stderr = job.communicate('', timeout=60)
  assert job.returncode == 0, stderr
  return line, stderr


def test_progress_reaches_a_pipe_at_once_and_library_info_is_hidden():
  line, stderr = _run_job()
  assert line == 'step 1/2 | progress\n'
  assert 'library info line' not in stderr
  assert 'library warning line' in stderr


def test_verbosity_flag_brings_library_info_back():
  line, stderr = _run_job('--verbosity=0')
  assert line == 'step 1/2 | progress\n'
  assert 'library info line' in stderr
