#!/usr/bin/env bash
# One device call of the headline v2 grid (device tool, kind nvidia-h200 or nvidia-h200-x2; carry
# .device_data, .whl and .triton_cache), continuing the committed results/headline_v2_manifest.jsonl:
#
#   PRISM_REC_GIT_COMMIT=<short hash> benchmarks/headline_gpu.sh OUT_DIR
#
# One driver spreads WORKERS (default 12 per GPU) training processes over DEVICE (default: every GPU,
# worker i on the i-th) through a CUDA MPS server (PRISM_REC_MPS, default 1; gpu_setup.sh falls back to
# time slices if the server does not serve) and starts runs for BUDGET seconds (default 520; once run
# times are known a run starts only when it is expected to end by then). DATASETS (default all six)
# narrows the grid, MODELS (default all) the backbones. OUT_DIR receives headline_v2_manifest.jsonl (the
# committed lines and the new ones), headline_v2_case_ranks.new.jsonl (the new runs' lines only: with
# the committed ones the file outgrows the 16 MiB a device call returns), headline.records.jsonl and
# headline_log.txt (and triton_cache.tgz: gpu_setup.sh); results/v2/README.md ("Reproducing") says how to merge
# and import them here.
# COMPILE (default auto: each backbone's mode of VERIFIED_MODES in prism_rec/training/compile.py, eager for
# the others) is the training step's compile mode (TrainConfig.compile: off, graphs, cudagraphs, ...;
# results/step.md measured them alone on the GPU); runs keep their settings hash across it, and each
# manifest line says its mode. For a mode named here (not auto, not off), the compiled encoder of every
# backbone of MODELS is first checked against eager on the GPU (benchmarks/step_bench.py --check-only, CHECK_PROCESSES at a time,
# default 6, each stopped after CHECK_SECONDS, default 180); the backbones whose check differs, fails or
# times out train eager (headline run --eager-models); the check's time comes off BUDGET.
# SPECULATE (default 1) passes --speculate: workers left idle start the other seeds of a backbone whose rate
# grid is unfinished at the rate leading so far (a run over ~300 s cannot wait for its grid to end in the
# same call, and runs cannot resume across calls); SPECULATE=0 only starts runs whose rate is chosen.
# PROTOCOL (default v2) is the headline protocol: v3 (prism_rec/experiments/headline/v3.py) writes
# headline_v3_manifest.jsonl (copying in the committed v2 runs whose settings match a cell: they are not
# retrained) and headline_v3_case_ranks.new.jsonl instead, continuing results/headline_v3_manifest.jsonl if
# there is one.
# SPLIT_WORKERS=N (default 0) also runs the split study (prism_rec/experiments/split_study.py) beside the grid on N
# more workers through the same MPS server, for the same budget; it writes split_manifest.jsonl,
# split_case_ranks.jsonl (the new lines only) and split_log.txt into OUT_DIR/split.
# AUTHORS_ARGS="--workers 3 ..." (default empty: none) also runs the authors' protocol grid (prism-rec authors
# grid: issue 39's design at its defaults; benchmarks/authors_gpu.sh sets it) beside it through the same MPS
# server, for the same budget, continuing OUT_DIR/authors_grid (carry results/authors_grid to continue an earlier call's); its
# manifest and log land in OUT_DIR/authors_grid.
set -uo pipefail
out=${1:?usage: benchmarks/headline_gpu.sh OUT_DIR}
: "${PRISM_REC_GIT_COMMIT:?set PRISM_REC_GIT_COMMIT to the commit this tree is (the copy has no .git)}"
export PRISM_REC_GIT_COMMIT
PRISM_REC_MPS=${PRISM_REC_MPS:-1}
. benchmarks/gpu_setup.sh || exit 1
mkdir -p "$out"
protocol=${PROTOCOL:-v2}
for file in "headline_${protocol}_manifest.jsonl" "headline_${protocol}_case_ranks.jsonl"; do
    if [ -f "results/$file" ]; then cp "results/$file" "$out/"; fi
done
gpus=$(nvidia-smi --query-gpu=index --format=csv,noheader | sed 's/^/cuda:/' | paste -sd, -)
device=${DEVICE:-$gpus}
workers=${WORKERS:-$((12 * $(echo "$device" | tr ',' '\n' | wc -l)))}
datasets=${DATASETS:-ml-100k,yelp-iclrec,electronics-gerec,books-dealrec,movies-long,movies-fedcsr}
budget=${BUDGET:-520}
# every option of the grid, refused before the compile check and any run (headline run --check)
python3 -m prism_rec.cli headline run --protocol "$protocol" --out "$out" --datasets "$datasets" \
    --models "${MODELS:-all}" --check || exit 2
# new_lines_only RESULTS_FILE OUT_FILE: OUT_FILE (RESULTS_FILE's committed lines, then this call's) becomes
# OUT_FILE's .new.jsonl with this call's lines alone
new_lines_only() {
    local committed
    committed=$(stat -c %s "$1" 2>/dev/null || echo 0)
    if [ -f "$2" ]; then
        tail -c +$((committed + 1)) "$2" > "${2%.jsonl}.new.jsonl" && rm "$2"
    fi
}
compile_mode=${COMPILE:-auto}
eager_models=
if [ "$compile_mode" != off ] && [ "$compile_mode" != auto ]; then
    checked_at=$SECONDS
    models=$(python3 -c "from prism_rec.options import resolve_models; print(*resolve_models('${MODELS:-all}'))")
    if [ -z "$models" ]; then echo "MODELS=${MODELS:-all}: no backbone to check"; exit 1; fi
    # a check that hangs is killed after CHECK_SECONDS (default 180) and leaves no passing line: eager
    echo "$models" | tr ' ' '\n' | xargs -P "${CHECK_PROCESSES:-6}" -I{} timeout "${CHECK_SECONDS:-180}" \
        python3 benchmarks/step_bench.py --check-only --compile "$compile_mode" --check-compiled {} \
        --out-dir "/tmp/compile_check/{}" > /tmp/compile_check.txt 2>&1
    grep -E '^- |Error' /tmp/compile_check.txt
    # every backbone without a passing line "- BACKBONE, compile MODE: relative gap ..." (pop trains nothing)
    eager_models=$(python3 -c "import re, sys
passed = set(re.findall(r'^- ([^,]+), compile [a-z-]+: relative gap .*\)$', open('/tmp/compile_check.txt').read(), re.M))
print(','.join(m for m in sys.argv[1:] if m not in passed and m != 'pop'))" $models)
    budget=$((budget - (SECONDS - checked_at)))
    echo "compile check: $((SECONDS - checked_at)) s; grid compile mode $compile_mode${eager_models:+, eager: $eager_models}; budget $budget s"
    if [ "$budget" -le 0 ]; then echo "the compile check spent BUDGET: no run started"; exit 1; fi
fi
# runs still in flight at the budget are abandoned within seconds; the timeout guards the call's limit
split_pid=
if [ "${SPLIT_WORKERS:-0}" -gt 0 ]; then
    mkdir -p "$out/split"
    timeout $((budget + 45)) python3 -m prism_rec.cli split-study run --out "$out/split" --workers "$SPLIT_WORKERS" \
        --budget "$budget" --device "$device" > "$out/split/split_log.txt" 2>&1 &
    split_pid=$!
fi
authors_pid=
if [ -n "${AUTHORS_ARGS:-}" ]; then
    mkdir -p "$out/authors_grid"
    if [ -d results/authors_grid ]; then cp -r results/authors_grid/. "$out/authors_grid/"; fi
    # shellcheck disable=SC2086  # one word per argument
    timeout $((budget + 45)) python3 -m prism_rec.cli authors grid --out "$out/authors_grid" --budget "$budget" \
        --device "${device%%,*}" $AUTHORS_ARGS > "$out/authors_grid/authors_log.txt" 2>&1 &
    authors_pid=$!
fi
timeout $((budget + 45)) python3 -m prism_rec.cli headline run --protocol "$protocol" --out "$out" --datasets "$datasets" \
    --models "${MODELS:-all}" --workers "$workers" --budget "$budget" --device "$device" \
    --set compile="$compile_mode" ${eager_models:+--eager-models "$eager_models"} \
    $(if [ "${SPECULATE:-1}" = 1 ]; then echo --speculate; fi) > "$out/headline_log.txt" 2>&1
status=$?
if [ -n "$split_pid" ]; then
    wait "$split_pid" || status=1
    new_lines_only results/split_case_ranks.jsonl "$out/split/split_case_ranks.jsonl"
    tail -n 3 "$out/split/split_log.txt"
fi
if [ -n "$authors_pid" ]; then
    # exit status 3: runs left for the next call (prism-rec authors grid --help)
    wait "$authors_pid"; authors_status=$?
    if [ "$authors_status" != 0 ] && [ "$authors_status" != 3 ]; then status=1; fi
    tail -n 3 "$out/authors_grid/authors_log.txt"
fi
prism_rec_stop_mps
new_lines_only "results/headline_${protocol}_case_ranks.jsonl" "$out/headline_${protocol}_case_ranks.jsonl"
tail -n 3 "$out/headline_log.txt"
prism_rec_return_triton_cache "$out"
exit $status
