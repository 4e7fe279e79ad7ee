#!/usr/bin/env bash
# Data-parallel scaling on a machine with >= 2 GPUs: `make bench` with NPROC=2 and NPROC=1 on the same
# benchmark, then results/scaling.md-style report (prism_rec/experiments/scaling.py) from the MLflow store.
#
#   benchmarks/scaling_gpu.sh OUT_DIR [PREVIOUS_DIR]
#
# PREVIOUS_DIR (the OUT_DIR of an earlier call, copied into the working tree) lends its store, so a call
# can run the process counts an earlier one had no time for (NPROCS=1) and report on all of them.
# Environment: DATASET (default books-dealrec, the largest shared subset), MODELS (prism,sasrec),
# EPOCHS (10), NPROCS (the process counts, "2 1"; "1 1" runs one process twice, for the run-to-run
# spread), PRECISION (bf16, or fp32: TF32 off, no bf16 rounding). Dropout is 0 so that the runs can agree: with
# dropout each process draws other masks than one process does. The MLflow store goes to OUT_DIR/store.
# Run `. benchmarks/gpu_setup.sh` first on the device machine (MLflow must be importable).
set -euo pipefail
out=${1:?usage: benchmarks/scaling_gpu.sh OUT_DIR [PREVIOUS_DIR]}
dataset=${DATASET:-books-dealrec}
mkdir -p "$out/store"
if [ -n "${2:-}" ]; then cp -r "$2/store/." "$out/store/"; fi
export MLFLOW_TRACKING_URI="sqlite:///$(cd "$out" && pwd)/store/mlflow.db"
venv=$(dirname "$(dirname "$(command -v python3)")")
stamp=$(mktemp)  # the machine's Python is the environment: a fresh stamp tells make's install step so
python3 -c "from prism_rec.data.sources import load_dataset; print(load_dataset('$dataset').stats())"
for nproc in ${NPROCS:-2 1}; do
    make bench VENV="$venv" STAMP="$stamp" NPROC="$nproc" DATASET="$dataset" MODELS="${MODELS:-prism,sasrec}" \
        EPOCHS="${EPOCHS:-10}" ARGS="--dropout 0 --precision ${PRECISION:-bf16} --no-progress --results-dir $out/results"
done
python3 -m prism_rec.cli scaling --dataset "$dataset" --out "$out/scaling.md"
