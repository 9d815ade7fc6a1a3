"""Multi-process start-up: `jax.distributed.initialize` when, and only when,
the job runs as several processes.

Detected from the environment the launchers set:
- JAX_COORDINATOR_ADDRESS (host:port of process 0) with JAX_NUM_PROCESSES
  and JAX_PROCESS_ID (launch/gpu_cluster.sh; any launcher of your own);
- SLURM with more than one task (SLURM_NTASKS), which jax reads itself;
- a multi-host TPU slice (TPU_WORKER_HOSTNAMES lists several hosts), which
  jax also reads itself.
On one process nothing happens, so the same command runs on a laptop.
`made_once` writes a file of the shared workdir once for all processes (a
vocabulary, a fitted filter): the others wait for process 0's word through
jax's coordination service, and end in one line where it fails, stops or
takes over an hour.
"""

import os
import time

from absl import logging
import jax

from bpd_jax.infra import errors

# How long the other processes wait for process 0 to make a file of
# `made_once` (a vocabulary of a large corpus takes minutes).
MADE_ONCE_TIMEOUT_S = 3600


def is_multiprocess() -> bool:
  env = os.environ
  return bool(env.get('JAX_COORDINATOR_ADDRESS')
              or int(env.get('SLURM_NTASKS', '1')) > 1
              or ',' in env.get('TPU_WORKER_HOSTNAMES', ''))


def initialize() -> None:
  """Joins the other processes of the job (no-op on a single process).

  Raises:
    ValueError: JAX_COORDINATOR_ADDRESS is set without JAX_NUM_PROCESSES
      and JAX_PROCESS_ID, outside a cluster jax recognises (SLURM, TPU).
  """
  if not is_multiprocess():
    return
  env = os.environ
  kwargs = {}
  if 'JAX_NUM_PROCESSES' in env or 'JAX_PROCESS_ID' in env:
    try:
      kwargs = dict(num_processes=int(env['JAX_NUM_PROCESSES']),
                    process_id=int(env['JAX_PROCESS_ID']))
    except (KeyError, ValueError):
      raise ValueError(
          f'JAX_NUM_PROCESSES={env.get("JAX_NUM_PROCESSES")!r} and '
          f'JAX_PROCESS_ID={env.get("JAX_PROCESS_ID")!r} must both be '
          f'integers.') from None
  elif env.get('JAX_COORDINATOR_ADDRESS') and not (
      int(env.get('SLURM_NTASKS', '1')) > 1
      or env.get('TPU_WORKER_HOSTNAMES')):
    raise ValueError('JAX_COORDINATOR_ADDRESS is set: also set '
                     'JAX_NUM_PROCESSES and JAX_PROCESS_ID (this process\'s '
                     'index).')
  jax.distributed.initialize(**kwargs)


def made_once(path: str, make, wait: bool, what: str,
              timeout_s: float = MADE_ONCE_TIMEOUT_S) -> None:
  """A file of the job's shared workdir, made by one process: process 0
  calls `make()` where `path` is missing; with several processes and
  `wait`, the others wait for it to say the file is made, or why it is
  not (each passes here, having seen the same files and taken the same
  branch).

  Process 0 tells the others through jax's coordination service (its
  key-value store), not a barrier: a barrier cannot carry process 0's
  error, and waits for it for ever where it fails first.

  Args:
    path: the file `make` writes (atomically: `atomic_files`, so that no
      process sees half of it).
    make: () -> None, writes `path`.
    wait: the processes wait for process 0 (the job that makes the file);
      False: a job that only reads it.
    what: the file's kind, for the errors ('vocabulary').
    timeout_s: how long the others wait for process 0.

  Raises:
    errors.ProcessError: (on the others) process 0 failed to make the
      file (its error, in one line), stopped, or took over `timeout_s`.
    errors.MissingFileError: `path` is still missing (a workdir that is
      not shared by all processes).
  """
  several = wait and jax.process_count() > 1
  if several and _client() is None:
    # Processes jax joined without its coordination service (none known
    # with jax.distributed.initialize): a barrier, no error, no timeout.
    _made_at_a_barrier(path, make, what)
  elif jax.process_index() == 0:
    key = _key(what) if several else None
    if not os.path.exists(path):
      try:
        make()
      except Exception as error:
        if key:
          _tell_failure(key, error)
        raise
    if key:
      _client().key_value_set(key, _MADE)
  elif several:
    _wait_for(_key(what), f'{what} {path}', timeout_s)
  if not os.path.exists(path):
    raise errors.MissingFileError(
        f'{what} {path} not found after process 0 made it: the workdir '
        f'must be shared by all processes.')


# Process 0's answer where the file is made; any other is its error.
_MADE = 'made'
# How long process 0, having failed, waits for the others to read why,
# and then for them to print it: where it ends first, jax's coordination
# service (process 0's) goes with it, and the others end in jax's fatal
# error instead of this one.
_TELL_TIMEOUT_S = 30
_TELL_GRACE_S = 2
_calls: dict[str, int] = {}


def _key(what: str) -> str:
  """The key-value store's key of this call: the same on every process, as
  they call here in the same order (not the path: hosts can mount the
  shared workdir at different paths)."""
  name = f'bpd_jax/made_once/{what}'
  _calls[name] = _calls.get(name, 0) + 1
  return f'{name}#{_calls[name]}'


def _made_at_a_barrier(path: str, make, what: str) -> None:
  """made_once's wait where jax offers no coordination service."""
  from jax.experimental import multihost_utils
  if not os.path.exists(path) and jax.process_index() == 0:
    make()
  multihost_utils.sync_global_devices(f'bpd_jax {what}')


def _client():
  # jax names no public handle on its coordination client; multihost_utils
  # reads this one too.
  from jax._src import distributed as jax_distributed
  return jax_distributed.global_state.client


def _wait_for(key: str, file: str, timeout_s: float) -> None:
  """Waits for process 0's word on `key`; any but _MADE is an error."""
  # Said first: where process 0 is killed, jax's own fatal error (every
  # process ends with its coordinator) can come before this function's.
  logging.info('Waiting for process 0 to make the %s (at most %g s).', file,
               timeout_s)
  client = _client()
  try:
    answer = client.blocking_key_value_get(key, int(timeout_s * 1000))
  except RuntimeError as error:  # jax's JaxRuntimeError: timeout, or gone.
    reason = str(error).split('\n')[0]
    raise errors.ProcessError(
        f'process 0 did not make the {file} within {timeout_s:g} s: it '
        f'is still at work, or stuck.' if 'DEADLINE_EXCEEDED' in reason else
        f'process 0 did not make the {file}: it stopped ({reason}).'
    ) from None
  if answer != _MADE:
    client.key_value_set(f'{key}/read/{jax.process_index()}', '')
    raise errors.ProcessError(
        f'process 0 did not make the {file}: {answer}')


def _tell_failure(key: str, error: Exception) -> None:
  """Gives the others process 0's `error` in one line, and them time to
  print it before process 0 ends."""
  text = ' '.join(str(error).split())
  if not isinstance(error, errors.JobError):  # A bug: its type helps.
    text = f'{type(error).__name__}: {text}'
  client = _client()
  try:
    client.key_value_set(key, text[:2000])
    deadline = time.monotonic() + _TELL_TIMEOUT_S
    for process in range(1, jax.process_count()):
      left_ms = int(max(deadline - time.monotonic(), 0) * 1000)
      client.blocking_key_value_get(f'{key}/read/{process}', left_ms)
    time.sleep(_TELL_GRACE_S)
  except RuntimeError:  # The others are gone: process 0's error stays.
    pass
