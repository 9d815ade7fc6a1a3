#!/usr/bin/env bash
# The bench on an accelerator in one go: does a k-position call cost about
# what a 1-position call costs there (the paper's premise), and what do the
# trained Multi30k heads give at batch 1 and 32?
#
#   scripts/accelerator_bench.sh DATA RUNS OUT
#
# DATA: the Multi30k text (train.en/.de, val.en/.de); RUNS: the Multi30k
# runs of docs/results/multi30k.md and block_drafter.md, under their names
# there (RUNS/base, and whichever head runs exist among RUNS/sequential,
# RUNS/draft_layer, RUNS/ar_src_base_soft (the frozen base's draft layer),
# RUNS/m30k_block and RUNS/m30k_blockc (the block drafters),
# RUNS/distilled_finetuned, RUNS/distilled_frozen_sequential,
# RUNS/distilled_sequential; the distilled ones read RUNS/distilled); OUT:
# one bench folder per setting (bench.json/.md/.png) and bench.log.
#
# First a Transformer-base-size model (6+6 layers, d_model 512, d_ff 2048)
# with random weights and each head type: step costs T(k) at batch 1 and
# 32 (random heads accept next to nothing; the costs are the point). Then
# each trained run at batch 1 and 32 with k = 2, 4, 8 and 'auto'. Each
# bench is cut at BENCH_TIMEOUT seconds (default 120) so that the whole
# fits a short lease. On a machine with several accelerators, last, the
# trained base again with its parameters and cache split over all of them
# (mesh (1, -1) on ('data', 'model'), the 'tensor' rules: attention heads,
# hidden units and the vocabulary per device), timed, with the table of
# each rule set's per-device memory and collectives per decoding
# iteration (--sharding_table; cut at SHARDED_TIMEOUT seconds, default
# 300: it compiles two programs a rule set); with one device, one line
# says it is skipped. PARTS=random, PARTS=trained or PARTS=sharded runs
# one part only; QUICK=1 runs the bench's --quick instead (a CPU check of
# the script: PARTS=trained QUICK=1 takes a few minutes on 2 cores, the
# random base-size models an hour; XLA_FLAGS=
# --xla_force_host_platform_device_count=8 gives the sharded part 8 CPU
# devices). PARTS=costs: scripts/drafter_costs.py, T(k)/T(1) of each
# drafter's call at the code LM's, Multi30k's, SmolLM2-135M's and
# Llama-3.2-1B's shapes for k up to 16 (cut at COSTS_TIMEOUT seconds,
# default 300; into OUT/drafter_costs; QUICK=1: the tiny shape), after
# the trained runs. PARTS=train (with the others: PARTS='train trained')
# first trains, on the accelerator, the runs the trained part reads that
# RUNS lacks: RUNS/base (the main job: the base and the paper's heads),
# then on its frozen base RUNS/ar_src_base_soft (the draft layer) and
# RUNS/m30k_blockc (the corrected block drafter), each job cut at
# TRAIN_TIMEOUT seconds (default 300; the drafters only after a base
# that ended) and its own evaluation kept to k=8 on 128 sentences (the
# bench measures); QUICK=1 trains 60 + 20 steps.
set -uo pipefail
if [ "$#" -ne 3 ]; then
  echo "usage: $0 DATA RUNS OUT" >&2
  exit 2
fi
DATA=$1 RUNS=$2 OUT=$3
PARTS=${PARTS:-random trained costs sharded}
needed=("$DATA/val.en")
# The train part makes the base run; the others read it.
[[ " $PARTS " == *" train "* ]] || needed+=("$RUNS/base/vocab.model")
for file in "${needed[@]}"; do
  if [ ! -e "$file" ]; then
    echo "$0: $file is missing" >&2
    exit 2
  fi
done
mkdir -p "$OUT"
LOG="$OUT/bench.log"
LIMIT=${BENCH_TIMEOUT:-120}
if [ "${QUICK:-0}" = 1 ]; then
  SWEEP=(--quick)
else
  SWEEP=(--batch_sizes=1,32 --ks=2,4,8 --criteria=exact --examples=128
         --calibration_examples=64)
fi

timed() {  # NAME SECONDS COMMAND...: logged, cut at SECONDS; its status
  local name=$1 seconds=$2 status
  shift 2
  echo "== $name $(date +%H:%M:%S)" | tee -a "$LOG"
  timeout "$seconds" "$@" >> "$LOG" 2>&1
  status=$?
  echo "   exit $status $(date +%H:%M:%S)" | tee -a "$LOG"
  return $status
}

bench() {  # NAME CONFIG_OPTIONS [FLAGS...]
  local name=$1 options=$2
  shift 2
  timed "$name" "$LIMIT" python -m bpd_jax.bench \
      --config="configs/multi30k.py:data_dir=$DATA${options:+,$options}" \
      --output_dir="$OUT/$name" "${SWEEP[@]}" "$@"
}

python -c 'import jax; print(jax.devices())' | tee -a "$LOG"
DEVICES=$(python -c 'import jax; print(jax.device_count())')

train() {  # NAME CONFIG_OPTIONS [FLAGS...]: a run of RUNS, unless there
  local name=$1 options=$2
  shift 2
  if [ -d "$RUNS/$name/checkpoints" ]; then
    echo "== train $name: in $RUNS already" | tee -a "$LOG"
    return
  fi
  timed "train $name" "${TRAIN_TIMEOUT:-300}" python -m bpd_jax.main \
      --config="configs/multi30k.py:data_dir=$DATA${options:+,$options}" \
      --workdir="$RUNS/$name" --config.eval.ks='(8,)' \
      --config.eval.num_examples=128 "$@"
}

if [[ " $PARTS " == *" train "* ]]; then
  STEPS=()
  [ "${QUICK:-0}" = 1 ] && STEPS=(--config.train.head_steps=20)
  # Drafters on a base cut short would measure that base: none then.
  train base "" "${STEPS[@]}" ${STEPS[@]:+--config.train.base_steps=60} &&
  for run in ar_src_base_soft:heads=autoregressive,source=base,targets=base \
      m30k_blockc:heads=block_corrected,correction=token,source=base,targets=base; do
    train "${run%%:*}" "init_from=$RUNS/base,${run#*:}" "${STEPS[@]}"
  done
  if [ ! -e "$RUNS/base/vocab.model" ]; then
    echo "$0: $RUNS/base/vocab.model is missing: the base did not train" \
        "(bench.log)" | tee -a "$LOG" >&2
    exit 1
  fi
fi
BASE_SIZE=(--config.model.size=base --config.model.d_ff=2048
           --config.model.num_encoder_layers=6
           --config.model.num_decoder_layers=6
           --config.model.head_hidden=512
           --config.task.vocab_path="$RUNS/base/vocab.model")
[[ " $PARTS " == *" random "* ]] &&
for heads in independent sequential autoregressive block; do
  bench "random_base_$heads" "heads=$heads" --init=random \
      --workdir="$OUT/random_base_$heads" "${BASE_SIZE[@]}"
done

# name:options, each a run of docs/results/multi30k.md or block_drafter.md
# (RUNS/base: the base with the paper's heads, trained by its first
# command).
[[ " $PARTS " == *" trained "* ]] &&
for run in base: sequential:heads=sequential \
    draft_layer:heads=autoregressive \
    ar_src_base_soft:heads=autoregressive,source=base,targets=base \
    m30k_block:heads=block,block_layers=2,source=base,targets=base \
    m30k_blockc:heads=block_corrected,correction=token,source=base,targets=base \
    distilled_finetuned:distilled=$RUNS/distilled,base=finetuned \
    distilled_frozen_sequential:distilled=$RUNS/distilled,heads=sequential \
    distilled_sequential:distilled=$RUNS/distilled,base=finetuned,heads=sequential; do
  name=${run%%:*} options=${run#*:}
  if [ "$name" = base ]; then
    bench base "" --workdir="$RUNS/base"
  elif [ -d "$RUNS/$name/checkpoints" ]; then
    bench "$name" "init_from=$RUNS/base,$options" --workdir="$RUNS/$name"
  fi
done

if [[ " $PARTS " == *" costs "* ]]; then
  SHAPES=code_lm,multi30k,smollm2-135m,llama-3.2-1b
  [ "${QUICK:-0}" = 1 ] && SHAPES=tiny
  timed drafter_costs "${COSTS_TIMEOUT:-300}" python scripts/drafter_costs.py \
      --shapes=$SHAPES --ks=1,2,4,8,12,16 --output_dir="$OUT/drafter_costs"
fi

if [[ " $PARTS " == *" sharded "* ]]; then
  if [ "$DEVICES" -lt 2 ]; then
    echo "== base_sharded: skipped, $DEVICES device (it needs several)" |
        tee -a "$LOG"
  else
    LIMIT=${SHARDED_TIMEOUT:-300} bench base_sharded "" \
        --workdir="$RUNS/base" --sharding_table \
        --config.mesh.shape='(1, -1)' --config.mesh.axes="('data', 'model')" \
        --config.mesh.param_rules=tensor
  fi
fi
echo "Wrote $OUT (bench.log, one folder per setting)." | tee -a "$LOG"
