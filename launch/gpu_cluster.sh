#!/usr/bin/env bash
# Multi-node GPUs: one process per host, all GPUs of a host in it.
#   sbatch --nodes=4 --ntasks-per-node=1 --gpus-per-node=8 launch/gpu_cluster.sh \
#       python -m bpd_jax.main --config=configs/wmt14_base.py:data_dir=$DATA --workdir=$RUNS/base
# Under sbatch/salloc it starts one task per node with srun; each task sets
# JAX_COORDINATOR_ADDRESS (the first node, port $PORT or 29500),
# JAX_NUM_PROCESSES and JAX_PROCESS_ID from SLURM, then runs the command.
# Without SLURM, set those three yourself on every host and run the command.
set -euo pipefail
if [ "$#" -eq 0 ]; then sed -n '2,8p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; fi
if [ -z "${BPD_TASK:-}" ]; then  # The batch script: start the tasks.
  [ -n "${SLURM_JOB_ID:-}" ] || { echo "not in a SLURM job: see $0 without arguments" >&2; exit 2; }
  BPD_TASK=1 exec srun --ntasks-per-node=1 "$0" "$@"
fi
host=${COORDINATOR_HOST:-$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)}
export JAX_COORDINATOR_ADDRESS="$host:${PORT:-29500}"
export JAX_NUM_PROCESSES="$SLURM_NTASKS" JAX_PROCESS_ID="$SLURM_PROCID"
exec "$@"
