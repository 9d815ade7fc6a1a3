"""One process of a two-process job that makes a file once
(tests/test_infra_distributed.py), and what each process saw.

    python tests/made_once_job.py DIR MODE

Run as each of two processes (JAX_COORDINATOR_ADDRESS, JAX_NUM_PROCESSES,
JAX_PROCESS_ID set): joins the job and calls `distributed.made_once` for
DIR/made.txt, whose making by process 0 MODE says:
- made: written atomically in two halves, 0.5 s apart; process 1 watches
  the path meanwhile and fails if it ever sees other than the whole text;
- fails: raises a DataError, as a task whose data cannot be read;
- killed: writes half of the file, waits 0.5 s, then kills its own process (SIGKILL).
A process that made or found the file prints `made: TEXT`; an
errors.JobError ends it as a job does (`jobs.run`): `Error: MESSAGE` on
stderr, exit with the error's status.
"""

import os
import signal
import sys
import threading
import time

import jax
from jax._src import distributed as jax_distributed

from bpd_jax.infra import atomic_files
from bpd_jax.infra import distributed
from bpd_jax.infra import errors

TEXT = 'first half;' * 1000 + 'second half.' * 1000


def make(path: str, mode: str) -> None:
  if mode == 'fails':
    raise errors.DataError(f'data {path}.src cannot be read: Is a directory')
  with atomic_files.replacing(path) as temp:
    with open(temp, 'w') as f:
      f.write(TEXT[:len(TEXT) // 2])
      f.flush()
      if mode == 'killed':
        time.sleep(0.5)  # Process 1 is waiting by now.
        os.kill(os.getpid(), signal.SIGKILL)
      time.sleep(0.5)
      f.write(TEXT[len(TEXT) // 2:])


def watch(path: str, seen: set, done: threading.Event) -> None:
  """Adds to `seen` every content of `path` found until `done`."""
  while not done.is_set():
    try:
      with open(path) as f:
        seen.add(f.read())
    except FileNotFoundError:
      pass
    time.sleep(0.001)


def main(directory: str, mode: str) -> None:
  distributed.initialize()
  # Both start together, their devices known (a job's start-up, before the
  # files it makes once).
  jax.devices()
  jax_distributed.global_state.client.wait_at_barrier('made_once_job start',
                                                      60_000)
  path = os.path.join(directory, 'made.txt')
  seen, done = set(), threading.Event()
  watcher = threading.Thread(target=watch, args=(path, seen, done))
  if jax.process_index() == 1:
    watcher.start()
  try:
    distributed.made_once(path, lambda: make(path, mode), True, 'test file',
                          timeout_s=60)
  except errors.JobError as error:
    print(f'Error: {error}', file=sys.stderr, flush=True)
    os._exit(error.exit_code)
  done.set()
  if watcher.is_alive():
    watcher.join()
  assert seen <= {TEXT}, f'process 1 saw part of the file: {len(seen)}'
  with open(path) as f:
    print('made:', f.read() == TEXT, flush=True)
  sys.stdout.flush()
  os._exit(0)  # No shutdown barrier: each process ends on its own.


if __name__ == '__main__':
  main(*sys.argv[1:])
