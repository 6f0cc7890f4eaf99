#!/usr/bin/env bash
# The GPU smoke (issue 24.5): check that what the GPU machine lacks is installed (the GPU kit does it), build the
# Qwen2-0.5B-shaped model, run recipes/gpu_smoke.yaml (the three studies in miniature), time oxbench's
# online step against TRL's GRPOTrainer on the same model, and write the summary. About 8 minutes on one
# H200; everything lands in $OUT (the device run's folder) or results/gpu_smoke/.
#
# It runs from the GPU kit (scripts/gpu_kit.sh builds gpu_kit/, whose run.sh installs what the machine
# lacks, then runs this):
#   Here:         bash scripts/gpu_kit.sh                      (gpu_kit/, git-ignored, under 32 MiB)
#   The device:   the call of docs/gpus.md, "The GPU smoke": command "bash gpu_kit/run.sh", carry ["gpu_kit"]
#   Anywhere:     SMOKE_MODEL=/path/to/checkpoint bash scripts/gpu_smoke.sh   (oxbench and deepspeed installed)
#
# Steps have time limits (grid 300 s of cells, TRL 100 s), so a stuck step cannot eat the whole run.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
DEST="${OUT:-results/gpu_smoke}"
RUNS="${SMOKE_RUNS:-/tmp/oxbench-gpu-smoke}"   # the run directories (packed into runs.tgz at the end)
MODEL="${SMOKE_MODEL:-smoke_model/qwen2-0.5b}"
PY="${PYTHON:-python3}"
mkdir -p "$DEST" "$RUNS"
exec > >(tee -a "$DEST/smoke.log") 2>&1
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_DATASETS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
export OXBENCH_CACHE="$RUNS/cache"
t0=$SECONDS
step() { printf '\n== %s (%d s)\n' "$1" $((SECONDS - t0)); }

"$PY" -c "import torch, deepspeed, pydantic, oxbench; print('torch', torch.__version__, 'cuda', torch.cuda.is_available(), '| deepspeed', deepspeed.__version__)" || exit 1
nvidia-smi --query-gpu=name,memory.total,memory.used --format=csv,noheader 2>/dev/null

step "model: $MODEL"
if [[ -z "${SMOKE_MODEL:-}" ]]; then
    "$PY" scripts/gpu_smoke.py model --dir "$MODEL" || exit 1
fi
model_arg=(--model "$MODEL")

step "grid: recipes/gpu_smoke.yaml"
deadline="${SMOKE_DEADLINE:-300}"
timeout -s INT $((deadline + 30)) "$PY" scripts/gpu_smoke.py grid --out "$RUNS" "${model_arg[@]}" --deadline "$deadline"

step "TRL GRPOTrainer beside oxbench's online step, the same model"
if "$PY" -c "import trl, datasets" 2>/dev/null; then
    timeout -s INT 100 "$PY" benchmarks/throughput.py online --device "${SMOKE_DEVICE:-cuda}" --scales smoke \
        --base "smoke=$MODEL" --steps 3 --rounds 1 --threads 8 --contenders oxbench-hf oxbench-vllm trl \
        --out "$RUNS/throughput.json"
else
    echo "skipped: trl or datasets is not importable"
fi

step "summary"
"$PY" scripts/gpu_smoke.py summary --out "$RUNS" --model "$MODEL"
cp "$RUNS"/summary.json "$RUNS"/summary.md "$DEST"/ 2>/dev/null
[[ -f "$RUNS/throughput.json" ]] && cp "$RUNS/throughput.json" "$DEST"/
tar -czf "$DEST/runs.tgz" -C "$RUNS" --exclude cache --exclude '*.safetensors' --exclude 'checkpoints' gpu_smoke skipped.json 2>/dev/null
step "done"
