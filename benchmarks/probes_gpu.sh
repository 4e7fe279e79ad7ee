#!/usr/bin/env bash
# Mechanistic probes at the paper's settings on one GPU box (16 cores): many (task, model, seed) trainings
# at once, within a wall-clock budget, resumable.
#
#   benchmarks/probes_gpu.sh OUT_DIR [PREVIOUS_DIR]
#
# OUT_DIR receives probes.md, probes_manifest.jsonl, probes_checkpoints.pt (paused runs) and probes_log.txt.
# PREVIOUS_DIR (the OUT_DIR of an earlier call, copied into the working tree) is continued: its finished
# runs are skipped and its paused ones resume from their checkpoints. Environment: DEVICE (default cuda;
# cuda:0,cuda:1 spreads the workers over two GPUs), WORKERS (default 14),
# BUDGET seconds (default 510, for a 10-minute device call), SEEDS (default 3), MODELS, TASKS, PYTHON.
# The device image has no MLflow: runs go to the manifest only; log them here afterwards with
#   python -m prism_rec.probes --out OUT_DIR --log-manifest [same --tasks/--models/--seeds]
set -euo pipefail
out=${1:?usage: benchmarks/probes_gpu.sh OUT_DIR [PREVIOUS_DIR]}
previous=${2:-}
python=${PYTHON:-python3}
mkdir -p "$out"
if [ -n "$previous" ]; then
    for name in probes_manifest.jsonl probes_checkpoints.pt; do
        if [ -f "$previous/$name" ]; then cp "$previous/$name" "$out/"; fi
    done
fi
"$python" -c "import prism_rec.baselines" 2>/dev/null \
    || "$python" -m pip install --quiet --no-deps --no-build-isolation -e .
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader || true
"$python" -m prism_rec.probes \
    --tasks "${TASKS:-all}" \
    --models "${MODELS:-sasrec,transformer++,gated_deltanet,mamba2,prism:L=2,prism-L0}" \
    --seeds "${SEEDS:-3}" --profile paper --device "${DEVICE:-cuda}" \
    --workers "${WORKERS:-14}" --time-budget "${BUDGET:-510}" --out "$out" --no-mlflow 2>&1 | tee "$out/probes_log.txt"
