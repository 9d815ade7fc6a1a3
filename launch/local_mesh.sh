#!/usr/bin/env bash
# Runs a command with the CPU split into N simulated devices (default 8), to
# try sharded decoding or training on a laptop before a pod:
#   DEVICES=8 launch/local_mesh.sh python -m bpd_jax.main --config=... --workdir=...
set -euo pipefail
if [ "$#" -eq 0 ]; then
  echo "usage: DEVICES=N $0 COMMAND [ARGS...]" >&2
  exit 2
fi
export XLA_FLAGS="${XLA_FLAGS:-} --xla_force_host_platform_device_count=${DEVICES:-8}"
exec "$@"
