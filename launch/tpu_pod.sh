#!/usr/bin/env bash
# A TPU pod slice: create it, set up every host, run one command on all.
#   TPU=bpd ZONE=us-central2-b TYPE=v4-32 launch/tpu_pod.sh create
#   TPU=bpd ZONE=us-central2-b launch/tpu_pod.sh setup     # copy repo, pip install
#   TPU=bpd ZONE=us-central2-b launch/tpu_pod.sh run python -m bpd_jax.main \
#       --config=configs/wmt14_base.py:data_dir=/mnt/data/tfds --workdir=/mnt/runs/base
#   TPU=bpd ZONE=us-central2-b launch/tpu_pod.sh delete
# Every host runs the same command; jax finds the slice's other hosts itself
# (bpd_jax/infra/distributed.py). The data dir and the workdir must be mounted on
# every host (NFS, Filestore, gcsfuse): all read the data, all write the
# checkpoints, process 0 writes the vocabulary.
set -euo pipefail
usage() { sed -n '2,11p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
[ "$#" -ge 1 ] && [ -n "${TPU:-}" ] && [ -n "${ZONE:-}" ] || usage
action=$1; shift
tpu=(compute tpus tpu-vm)
on_all() { gcloud "${tpu[@]}" ssh "$TPU" --zone="$ZONE" --worker=all --command="$1"; }
case "$action" in
  create) gcloud "${tpu[@]}" create "$TPU" --zone="$ZONE" \
            --accelerator-type="${TYPE:?set TYPE, e.g. v4-32}" \
            --version="${RUNTIME:-tpu-ubuntu2204-base}" ;;
  setup) gcloud "${tpu[@]}" scp --recurse --zone="$ZONE" --worker=all \
           "$(dirname "$0")/.." "$TPU":~/bpd_jax
         on_all 'cd ~/bpd_jax && pip install -r requirements.txt && pip install -U "jax[tpu]"' ;;
  run) [ "$#" -ge 1 ] || usage
       on_all "cd ~/bpd_jax && $(printf '%q ' "$@")" ;;
  delete) gcloud "${tpu[@]}" delete "$TPU" --zone="$ZONE" --quiet ;;
  *) usage ;;
esac
