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
vocabulary, a fitted filter).
"""

import os

import jax


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


def made_once(path: str, make, wait: bool, what: str) -> None:
  """A file of the job's shared workdir, made by one process: process 0
  calls `make()` where `path` is missing; with several processes and
  `wait`, every process waits there for it (each passes here, having seen
  the same files and taken the same branch).

  Args:
    path: the file `make` writes.
    make: () -> None, writes `path`.
    wait: the processes wait for process 0 (the job that makes the file);
      False: a job that only reads it.
    what: the file's kind, for the barrier's name and the error.

  Raises:
    FileNotFoundError: `path` is still missing (a workdir that is not
      shared by all processes).
  """
  from jax.experimental import multihost_utils
  if not os.path.exists(path) and jax.process_index() == 0:
    make()
  if wait and jax.process_count() > 1:
    multihost_utils.sync_global_devices(f'bpd_jax {what}')
  if not os.path.exists(path):
    raise FileNotFoundError(
        f'{what} {path} not found after process 0 made it: the workdir '
        f'must be shared by all processes.')
