#!/usr/bin/env bash
# One device call of the headline grid on a 2-GPU H200 box (device tool, kind nvidia-h200-x2, carry
# .device_data and .triton_cache), continuing the committed results/headline_manifest.jsonl:
#
#   PRISM_REC_GIT_COMMIT=<short hash> benchmarks/headline_gpu.sh OUT_DIR
#
# One driver spreads WORKERS (default 24) training processes over DEVICE (default cuda:0,cuda:1), worker
# i on the i-th GPU, through a CUDA MPS server (PRISM_REC_MPS, default 1; gpu_setup.sh falls back to time
# slices if the server does not serve) and starts runs for BUDGET seconds (default 520; a run starts only
# when it is expected to end by then). DATASETS (default all four) narrows the grid. OUT_DIR receives
# headline_manifest.jsonl (the committed lines and the new ones), headline.records.jsonl and
# headline_log.txt; results/README.md ("Reproducing") says how to merge and import them here.
set -uo pipefail
out=${1:?usage: benchmarks/headline_gpu.sh OUT_DIR}
: "${PRISM_REC_GIT_COMMIT:?set PRISM_REC_GIT_COMMIT to the commit this tree is (the copy has no .git)}"
export PRISM_REC_GIT_COMMIT
PRISM_REC_MPS=${PRISM_REC_MPS:-1}
. benchmarks/gpu_setup.sh || exit 1
mkdir -p "$out"
cp results/headline_manifest.jsonl "$out/"
datasets=${DATASETS:-yelp-iclrec,electronics-gerec,books-dealrec,movies-fedcsr}
budget=${BUDGET:-520}
# runs still in flight at the budget are abandoned within seconds; the timeout guards the call's limit
timeout $((budget + 45)) python3 -m prism_rec.headline run --out "$out" --datasets "$datasets" \
    --workers "${WORKERS:-24}" --budget "$budget" --device "${DEVICE:-cuda:0,cuda:1}" > "$out/headline_log.txt" 2>&1
status=$?
if [ -n "${CUDA_MPS_PIPE_DIRECTORY:-}" ]; then echo quit | nvidia-cuda-mps-control; fi
tail -n 3 "$out/headline_log.txt"
exit $status
