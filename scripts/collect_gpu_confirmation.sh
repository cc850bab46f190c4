#!/usr/bin/env bash
# GPU confirmation trace (issue: evaluation, item 3): a fresh harness trace of a model
# shape that no choice in this repository was made on (Qwen2.5-7B layer dimensions,
# 12 layers; data/gpu is Llama-3-8B with 8 layers), same collector and design as
# data/gpu (1000 decode + 1000 prefill + 1000 mixed configurations, 3 replicates).
# Run from the repository root on a machine with a CUDA GPU and PyTorch:
#     OUT=data/gpu-confirmation/run1 bash scripts/collect_gpu_confirmation.sh
# and a second, later run of fresh configurations of the same shape (run-to-run shift):
#     OUT=data/gpu-confirmation/run2 SEED=2 bash scripts/collect_gpu_confirmation.sh
# and a third, shorter one (800 configurations per phase, to fit the remaining device time):
#     OUT=data/gpu-confirmation/run3 SEED=3 N_PER_PHASE=800 MAX_SECONDS=150 bash scripts/collect_gpu_confirmation.sh
set -euo pipefail
OUT=${OUT:?set OUT to the output folder}
mkdir -p "$OUT"
{
  date -u +%Y-%m-%dT%H:%M:%SZ
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,temperature.gpu,utilization.gpu --format=csv || true
  python3 -c "import sys, torch, numpy, pandas; print(sys.version.split()[0], torch.__version__, torch.version.cuda, numpy.__version__, pandas.__version__)"
  cat /proc/loadavg
} 2>&1 | tee "$OUT/env.txt"
timeout "${COLLECT_TIMEOUT:-420}" python3 -m perfmodel.data.collect_torch \
    --config perfmodel/data/configs/qwen-gpu-7b-12l.json \
    --out "$OUT" --n-decode "${N_PER_PHASE:-1000}" --n-prefill "${N_PER_PHASE:-1000}" --n-mixed "${N_PER_PHASE:-1000}" --replicates 3 \
    --seed "${SEED:-1}" --max-seconds "${MAX_SECONDS:-220}" --warmup-all --warmup-max-seconds 60 \
    --progress-every 500 2>&1 | tee "$OUT/run.log"
python3 -m perfmodel.data.collect_torch --summarize "$OUT"/*.csv > "$OUT/noise_floor.json" 2>&1 || true
cat /proc/loadavg >> "$OUT/env.txt"
ls -la "$OUT"
