#!/usr/bin/env bash
# Collect every committed vLLM-CPU step trace into data/vllm-cpu/<model>/.
#
# What: for llama-tiny and llama-small (perfmodel/configs/), each run in its own engine process:
#   mixed-r1..r3      3 same-seed replicates back to back (noise floor, run-level drift)
#   decode_sweep      B = 1..64 at prompt lengths 32 and 256
#   prefill_sweep     S = 16..512, single / multi-request / with prior context
#   fixed_tokens      >= 1000 steps pinned at S = cap (512 tiny, 256 small)
#   closed_loop-r1..r3  reference closed loop (docs/model.md#closed-loop-benchmark: 40 requests,
#                     8 in flight, 32 + 50 tokens), each with a
#                     mixed calibration trace before and after in the same engine process
#                     (same seed and engine settings as mixed-r*, so a calibration trace has
#                     the schedule of the first N steps of the mixed replicates)
# Steps: tiny  3x1500 + 800 + 600 + 1500 + 3x(250 + 2x150) = 9,050
#        small 3x800  + 400 + 300 + 1000 + 3x(250 + 2x100) = 5,450;   total ~14,500 (>= 5,000).
#
# Estimated run time ~25 min on a quiet machine (measured 2026-11-25 on this 2-core host, steps
# with process CPU / wall >= 1.7, i.e. both cores to ourselves):
#   llama-tiny  mean step ~10 ms in mixed (~100 steps/s), ~5 ms decode at small B, ~35 ms at
#               S = 512 with ~40 decodes  -> ~2.5 min of steps;
#   llama-small mean step ~49 ms in mixed (~20 steps/s), ~25 ms decode at small B, ~125 ms at
#               S = 256, ~150-250 ms at S = 512   -> ~6 min of steps;
#   18 engine starts at ~40-70 s each (import ~15 s, torch.compile ~20-50 s, 32 warm-up steps)
#               -> ~15 min.
# With another busy process on the machine, steps slow down 2-15x (one of the two OpenMP threads
# loses its core and the other spins): the run then takes hours and the steps are flagged as
# contended. Nothing else may run during collection.
#
# Confirmation data (collected after the model of record was frozen; docs/model.md, "Model of
# record"): MODELS=llama-mid PARTS=sweeps scripts/collect_all.sh collects llama-mid (5 layers,
# hidden 512, GQA 8/4 heads: a size and head layout used nowhere before) with the same collector:
# mixed-r1..r3 + decode_sweep + prefill_sweep + fixed_tokens (no closed loop).
#
# Run from the repository root, with nothing else running on the machine:
#   scripts/collect_all.sh            # refuses if any output file exists
#   MODELS="llama-tiny" PARTS=sweeps scripts/collect_all.sh   # a subset
#   PY=/path/to/python scripts/collect_all.sh
#   EAGER=1 scripts/collect_all.sh    # --enforce-eager: no torch.compile at each of the 18 engine
#                                     # starts (saves ~10 min; steps ~15-25% slower than compiled)
set -euo pipefail

cd "$(dirname "$0")/.."
PY=${PY:-.venv-collect/bin/python}
SEED=${SEED:-1}
WARMUP=32
OUT=${OUT:-data/vllm-cpu}
LOGDIR=$(mktemp -d "${TMPDIR:-/tmp}/collect_all.XXXXXX")

if ! "$PY" -c "import vllm" 2>/dev/null; then
  echo "collect_all: $PY cannot import vllm (install the 'collect' extra: README.md, Data)" >&2
  exit 2
fi

# Every trace this script writes (the CLI adds .meta.json, .summary.json, .calib-*.csv).
MODELS=${MODELS:-llama-tiny llama-small}
PARTS=${PARTS:-all}  # all | sweeps (no closed loop)
case "$PARTS" in all|sweeps) ;; *) echo "collect_all: PARTS must be all or sweeps, not '$PARTS'" >&2; exit 2;; esac
files=(mixed-r1 mixed-r2 mixed-r3 decode_sweep prefill_sweep fixed_tokens)
[[ $PARTS == all ]] && files+=(closed_loop-r1 closed_loop-r2 closed_loop-r3)
planned=()
for m in $MODELS; do
  case "$m" in llama-tiny|llama-small|llama-mid) ;;
    *) echo "collect_all: unknown model '$m' (llama-tiny, llama-small, llama-mid)" >&2; exit 2;; esac
  for f in "${files[@]}"; do
    planned+=("$OUT/$m/$f")
  done
done
existing=()
for p in "${planned[@]}"; do
  for f in "$p".csv "$p".meta.json "$p".summary.json "$p".calib-pre.csv "$p".calib-post.csv; do
    [[ -e "$f" ]] && existing+=("$f")
  done
done
if (( ${#existing[@]} )); then
  echo "collect_all: refusing to run, outputs exist (remove them first): ${existing[*]}" >&2
  exit 2
fi

load=$(cut -d' ' -f1 /proc/loadavg)
echo "collect_all: start $(date -u +%FT%TZ), 1-min load $load (should be < 0.5)"

collect() {  # collect MODEL WORKLOAD NAME [extra args...]
  local model=$1 workload=$2 name=$3
  shift 3
  local t0=$SECONDS
  "$PY" -m perfmodel collect vllm --model-config "$model" --workload "$workload" \
    --random-state "$SEED" --warmup-steps "$WARMUP" -o "$OUT/$model/$name.csv" ${EAGER:+--enforce-eager} "$@" \
    > "$LOGDIR/$model-$name.log" 2>&1 || { tail -20 "$LOGDIR/$model-$name.log" >&2; exit 1; }
  echo "  $model/$name: $((SECONDS - t0)) s"
}

run_model() {  # run_model MODEL MIXED_STEPS DECODE PREFILL FIXED FIXED_CAP CALIB
  local m=$1 mixed=$2 dec=$3 pre=$4 fixed=$5 fixed_cap=$6 calib=$7
  mkdir -p "$OUT/$m"
  for r in 1 2 3; do collect "$m" mixed "mixed-r$r" --steps "$mixed"; done
  collect "$m" decode_sweep decode_sweep --steps "$dec"
  collect "$m" prefill_sweep prefill_sweep --steps "$pre"
  collect "$m" fixed_tokens fixed_tokens --steps "$fixed" --param "token_cap=$fixed_cap"
  [[ $PARTS == all ]] || return 0
  for r in 1 2 3; do
    collect "$m" closed_loop "closed_loop-r$r" --calibration-steps "$calib"
  done
}

for m in $MODELS; do
  case "$m" in
    llama-tiny)  run_model llama-tiny 1500 800 600 1500 512 150 ;;
    llama-small) run_model llama-small 800 400 300 1000 256 100 ;;
    llama-mid)   run_model llama-mid 800 400 300 800 256 100 ;;
  esac
done

echo "collect_all: done $(date -u +%FT%TZ); engine logs in $LOGDIR"
