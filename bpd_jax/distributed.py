"""Multi-process start-up: `jax.distributed.initialize` when, and only when,
the job runs as several processes.

Detected from the environment the launchers set: JAX_COORDINATOR_ADDRESS
(with JAX_NUM_PROCESSES and JAX_PROCESS_ID, see launch/), SLURM with more
than one task, or a multi-host TPU slice (TPU_WORKER_HOSTNAMES lists several
hosts). On one process nothing happens.
"""

import os

import jax


def is_multiprocess() -> bool:
  env = os.environ
  return bool(env.get('JAX_COORDINATOR_ADDRESS')
              or int(env.get('SLURM_NTASKS', '1')) > 1
              or ',' in env.get('TPU_WORKER_HOSTNAMES', ''))


def initialize() -> None:
  """Joins the other processes of the job (no-op on a single process)."""
  if is_multiprocess():
    jax.distributed.initialize()
