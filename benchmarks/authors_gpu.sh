#!/usr/bin/env bash
# One device call of issue 39's design (device tool, kind nvidia-h200; carry .device_data, .whl and
# .triton_cache): the authors' protocol grid (prism-rec authors grid at its defaults, the design of
# prism_rec/protocols/authors/design.py, continuing the committed results/authors_grid) beside a headline v3
# slice of the same backbones' next-item runs on ml-100k, both through one MPS server
# (benchmarks/headline_gpu.sh, its AUTHORS_ARGS):
#
#   PRISM_REC_GIT_COMMIT=<short hash> benchmarks/authors_gpu.sh OUT_DIR
#
# BUDGET (default 240 s) is both grids' budget; AUTHORS_WORKERS (default 3) training processes run the
# authors grid. MODELS (default the design's next-item arms not yet complete in results/headline_v3_manifest.jsonl)
# and DATASETS (default ml-100k) narrow the headline slice; PROTOCOL is v3. OUT_DIR receives headline_gpu.sh's
# files and authors_grid.tgz: authors_grid/ with the whole manifest, the log and this call's new test cases
# (the device returns 8 files at most); `tar xzf OUT_DIR/authors_grid.tgz -C results` merges it into
# results/authors_grid, then `prism-rec authors table --from results/authors_grid` writes the report.
# The grid's runs replay CUDA graphs for their full batches once tests/protocols/test_train.py's GPU tests
# (-k cuda_graphs: the graphed runs train the eager ones) pass here (the machine's own pytest); otherwise they
# train eager (authors grid --eager), or with GRAPHS_OR_STOP=1 the call ends there. With GRAPHS_CHECK=beside
# the tests run beside the grids instead of before them (their minutes are not taken from the call) and the
# grid trains graphed; if they fail, the archive is named authors_grid.unchecked.tgz (not to be merged) and
# the call exits 1. OUT_DIR/graphs_check.txt holds the tests' output. STEP_MODELS=a,b,... also times each of
# those models' authors step, eager and graphed (benchmarks/authors_step.py, one process per model so that a
# crash loses only its own row), beside the grids; OUT_DIR/authors_step.txt holds their rows and errors.
# AUTHORS_MODELS=a,b,... narrows the authors grid to those models (authors grid --models);
# AUTHORS_DATASETS=a,b,... runs the authors grid on those datasets (authors grid --datasets; default ml-100k);
# AUTHORS_SCAN_BACKEND=torch trains the authors grid's models that run the delta scan (registry.runs_scan:
# gated_deltanet, prism, mamba2 and mamba2-authors of the design) on the scan's PyTorch path instead of the
# Triton kernels (authors grid --scan-backend; each record's "scan" names the backend).
# BEFORE="COMMAND" runs COMMAND alone on the GPU before the grids start (no MPS server yet; at most
# BEFORE_TIMEOUT seconds, default half of BUDGET, and its time comes off BUDGET): a diagnosis that must not
# share the GPU, as
#   BEFORE="CUDA_LAUNCH_BLOCKING=1 python3 -m prism_rec.cli authors train --model gated_deltanet --epochs 1 --lr 0.001"
# OUT_DIR/before.txt holds its output and exit status. BESIDE="COMMAND" runs COMMAND beside the grids (a
# diagnosis, say); OUT_DIR/beside.txt holds its output.
set -uo pipefail
out=${1:?usage: benchmarks/authors_gpu.sh OUT_DIR}
export PROTOCOL=v3 BUDGET=${BUDGET:-240} DATASETS=${DATASETS:-ml-100k}
export MODELS=${MODELS:-prism-authors,gdn-authors,mamba2-authors,mamba2,transformer++,null}
# the settings of this script, checked before anything is installed or trained
if ! [[ $BUDGET =~ ^[0-9]+$ ]]; then echo "BUDGET must be whole seconds, got '$BUDGET'"; exit 2; fi
before_timeout=${BEFORE_TIMEOUT:-$((BUDGET / 2))}
if ! [[ $before_timeout =~ ^[0-9]+$ ]] || [ "$before_timeout" -ge "$BUDGET" ]; then
    echo "BEFORE_TIMEOUT must be whole seconds below BUDGET ($BUDGET), got '$before_timeout'"; exit 2
fi
. benchmarks/gpu_setup.sh || exit 1
if ! python3 -c "import sys; from prism_rec.kernels.delta_scan import BACKENDS; sys.exit(sys.argv[1] not in BACKENDS)" \
    "${AUTHORS_SCAN_BACKEND:-auto}"; then
    echo "AUTHORS_SCAN_BACKEND must be one of kernels/delta_scan.py's BACKENDS, got '$AUTHORS_SCAN_BACKEND'"; exit 2
fi
if [ -n "${AUTHORS_DATASETS:-}" ] && ! python3 -c "import sys
from prism_rec.errors import OptionError
from prism_rec.protocols.authors.data import check_dataset
try:
    [check_dataset(name, 'AUTHORS_DATASETS') for name in sys.argv[1].split(',')]
except OptionError as error:
    sys.exit(str(error))" "$AUTHORS_DATASETS"; then
    exit 2
fi
# the headline slice's options too (a preset without its base, say), before BEFORE and both grids start
python3 -m prism_rec.cli headline run --protocol "$PROTOCOL" --out "$out" --datasets "$DATASETS" --models "$MODELS" \
    --check || exit 2
mkdir -p "$out"
if [ -n "${BEFORE:-}" ]; then
    started=$SECONDS
    timeout -k 10 "$before_timeout" bash -c "$BEFORE" > "$out/before.txt" 2>&1
    echo "exit status $? after $((SECONDS - started)) s" >> "$out/before.txt"
    echo "BEFORE: $(tail -n 1 "$out/before.txt")"
    BUDGET=$((BUDGET - (SECONDS - started)))
    if [ "$BUDGET" -le 0 ]; then echo "BEFORE took the whole budget; no grid runs"; exit 1; fi
fi
graphs_check() {
    timeout 300 python3 -m pytest -q -p no:cacheprovider tests/protocols/test_train.py -k cuda_graphs \
        > "$out/graphs_check.txt" 2>&1
}
eager= check_pid= archive=authors_grid.tgz
if [ "${GRAPHS_CHECK:-first}" = beside ]; then
    graphs_check &
    check_pid=$!
elif ! graphs_check; then
    eager=--eager
    if [ "${GRAPHS_OR_STOP:-0}" = 1 ]; then tail -n 40 "$out/graphs_check.txt"; exit 1; fi
fi
beside_pid=
if [ -n "${BESIDE:-}" ]; then
    bash -c "$BESIDE" > "$out/beside.txt" 2>&1 &
    beside_pid=$!
fi
step_pid=
if [ -n "${STEP_MODELS:-}" ]; then
    (for model in ${STEP_MODELS//,/ }; do
        echo "== $model"
        timeout 150 python3 benchmarks/authors_step.py --models "$model" --out "/tmp/authors_step_$model.md" \
            --neighbours-processes "$((${WORKERS:-12} + ${AUTHORS_WORKERS:-3}))" 2>&1 | grep -v UserWarning | tail -n 12
    done) > "$out/authors_step.txt" 2>&1 &
    step_pid=$!
fi
if [ -z "$check_pid" ]; then
    echo "CUDA graphs check: $(tail -n 1 "$out/graphs_check.txt")${eager:+; the grid trains eager}"
fi
# headline_gpu.sh passes the grid its own --budget (BUDGET less any compile check)
scan=${AUTHORS_SCAN_BACKEND:+--scan-backend $AUTHORS_SCAN_BACKEND}
export AUTHORS_ARGS="--workers ${AUTHORS_WORKERS:-3} $eager ${AUTHORS_MODELS:+--models $AUTHORS_MODELS} $scan
    ${AUTHORS_DATASETS:+--datasets $AUTHORS_DATASETS}"
benchmarks/headline_gpu.sh "$out"
status=$?
for pid in $step_pid $beside_pid; do wait "$pid"; done
if [ -n "$check_pid" ]; then
    if wait "$check_pid"; then
        echo "CUDA graphs check (beside the grid): $(tail -n 1 "$out/graphs_check.txt")"
    else
        archive=authors_grid.unchecked.tgz status=1
        echo "CUDA graphs check (beside the grid) FAILED: $(tail -n 1 "$out/graphs_check.txt"); this call's" \
            "graphed authors runs go to $archive, not to be merged"
    fi
fi
grid=$out/authors_grid
if [ -f "$grid/manifest.jsonl" ]; then
    new=()
    for file in "$grid"/cases/*.json; do
        if [ -f "$file" ] && [ ! -f "results/authors_grid/cases/${file##*/}" ]; then new+=("cases/${file##*/}"); fi
    done
    # the folder goes only once its archive is complete (the device returns at most 8 files)
    if tar czf "$out/$archive.tmp" -C "$out" authors_grid/manifest.jsonl authors_grid/authors_log.txt \
        "${new[@]/#/authors_grid/}" && mv "$out/$archive.tmp" "$out/$archive"; then
        echo "authors grid: ${#new[@]} new runs in $out/$archive"
        rm -rf "$grid"
    else
        echo "authors grid: packing failed; $grid left as it is"
        status=1
    fi
fi
exit $status
