#!/usr/bin/env bash
# One device call (device tool, kind nvidia-h200; carry .device_data and .whl) of issue 37's controlled
# comparison of compile modes in the headline grid: the same runs of one grid slice, trained once per mode of
# MODES (default off,cudagraphs), the modes' drivers side by side through one CUDA MPS server, so that every
# mode meets the same neighbours (results/step_grid.md could only compare runs of different calls):
#
#   PRISM_REC_GIT_COMMIT=<short hash> benchmarks/grid_modes_gpu.sh OUT_DIR
#
# Each mode gets its own empty folder (headline v2 reuses nothing), so each trains the same cells from the
# start: DATASETS (default yelp-iclrec) x MODELS (default sasrec,gated_deltanet,prism,mamba2,transformer++) at
# the headline settings (d_model 64), the fixed rates RATES (default 0.001,0.003; v2 does not extend them) on
# seed 0 and SEEDS (default 1) seeds at the chosen rate, WORKERS_PER_MODE (default 4) workers per mode, for
# BUDGET seconds (default 420). EXTRA="--set epochs=2" (say) passes more options to every driver. OUT_DIR/MODE
# holds each driver's manifest and log; OUT_DIR/grid_modes.jsonl all their lines, and OUT_DIR/step_grid.md
# benchmarks/grid_epochs.py's report of them (copy it to results/step_grid_controlled.md). Where a driver
# runs out of budget, its mode has fewer runs: compare the cells both finished.
set -uo pipefail
out=${1:?usage: benchmarks/grid_modes_gpu.sh OUT_DIR}
: "${PRISM_REC_GIT_COMMIT:?set PRISM_REC_GIT_COMMIT to the commit this tree is (the copy has no .git)}"
export PRISM_REC_GIT_COMMIT
PRISM_REC_MPS=${PRISM_REC_MPS:-1}
. benchmarks/gpu_setup.sh || exit 1
modes=${MODES:-off,cudagraphs}
mkdir -p "$out"
pids=()
for mode in ${modes//,/ }; do
    mkdir -p "$out/$mode"
    # shellcheck disable=SC2086  # EXTRA is a list of options
    timeout $((${BUDGET:-420} + 60)) python3 -m prism_rec.cli headline run --protocol v2 \
        --out "$out/$mode" --datasets "${DATASETS:-yelp-iclrec}" \
        --models "${MODELS:-sasrec,gated_deltanet,prism,mamba2,transformer++}" --lr-grid "${RATES:-0.001,0.003}" \
        --seeds "${SEEDS:-1}" --workers "${WORKERS_PER_MODE:-4}" --budget "${BUDGET:-420}" \
        --device "${DEVICE:-cuda}" --set "compile=$mode" ${EXTRA:-} > "$out/$mode/log.txt" 2>&1 &
    pids+=($!)
done
status=0
for pid in "${pids[@]}"; do wait "$pid" || status=1; done
cat "$out"/*/headline_v2_manifest.jsonl > "$out/grid_modes.jsonl" 2>/dev/null
python3 benchmarks/grid_epochs.py --manifest "$out/grid_modes.jsonl" --out "$out/step_grid.md" || status=1
for mode in ${modes//,/ }; do echo "== $mode"; grep -v "epoch [0-9]*:" "$out/$mode/log.txt" | tail -n 5; done
prism_rec_stop_mps
exit $status
