"""Multi-process start-up: `jax.distributed.initialize` when, and only when,
the job runs as several processes.

Detected from the environment the launchers set:
- JAX_COORDINATOR_ADDRESS (host:port of process 0) with JAX_NUM_PROCESSES
  and JAX_PROCESS_ID (launch/gpu_cluster.sh; any launcher of your own);
- SLURM with more than one task (SLURM_NTASKS), which jax reads itself;
- a multi-host TPU slice (TPU_WORKER_HOSTNAMES lists several hosts), which
  jax also reads itself.
On one process nothing happens, so the same command runs on a laptop.
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
