#!/usr/bin/env bash
# One device call of the probes v2 grid (issue 24; prism_rec/experiments/probes/grid.py): both profiles, 3 seeds, every
# task, eight models and the local XOR length sweep, in the grid's priority order, continuing earlier calls.
# Device tool, kind nvidia-h200 (or nvidia-h200-x2); carry .probes_runs (the state of the last call, if
# any) and .triton_cache; nothing else is needed (no dataset, no wheel):
#
#   PRISM_REC_GIT_COMMIT=<short hash> benchmarks/probes_gpu.sh OUT_DIR [PREVIOUS_DIR]
#
# PREVIOUS_DIR (default .probes_runs, git-ignored here through .git/info/exclude) holds the last call's
# probes_manifest.jsonl and probes_checkpoints.pt: its finished runs are skipped and its paused ones resume
# from their checkpoints. Without it the committed results/probes_manifest.jsonl is the base.
# WORKERS (default 15 per GPU: 16 cores, the driver mostly waits) training processes share DEVICE
# (default: every GPU, worker i on the i-th) through a CUDA MPS server (PRISM_REC_MPS, default 1;
# gpu_setup.sh falls back to time slices) and run for BUDGET seconds (default: what is left of
# CALL_SECONDS, default 525, since the script started, after the setup and the check below), starting no
# run in its last 60 s (prism-rec probe --start-margin: a run pauses only between steps, and its first step
# compiles); runs in flight then pause at their next step and are checkpointed, up to CHECKPOINT_MIB
# (default 15) in all so that the file comes back (a paused run that does not fit starts over next time);
# one still in a step 15 s after the deadline is abandoned (prism_rec/experiments/probes/runner.py).
# COMPILE (default graphs) is the training step's compile mode (prism-rec probe --compile: off, graphs,
# cudagraphs, inductor, auto); it is recorded in each manifest line and is not part of a run's identity
# (prism_rec/experiments/probes/train.py). Unless it is off, the compiled training of every grid model is
# first checked against eager on the first GPU
# (--check-compile: one step's loss and gradients, and a 40-step loss curve; fp32, TF32 off; about a minute
# with graphs; timeout CHECK_SECONDS, default 150 s with graphs and 300 s with TorchInductor's slower
# compilation); a gap or a failure stops the call before the grid starts. A warm machine that passed the
# check for the same sources (prism_rec, kernels, baselines) and mode in an earlier call skips it (a marker
# under /tmp, which a warm machine keeps between calls).
# The whole call took CALL_SECONDS + 20 to 30 s in sessions 12 and 13 (the grid's start-up, pausing, stopping
# the workers, the report; before 1d68239 stopped the workers side by side); a timeout at BUDGET + 30 s
# guards the grid.
# OUT_DIR receives six files: probes_manifest.jsonl (every line, old and new), probes_checkpoints.pt,
# probes.md (the v2 report from the manifest), probes_check.txt, probes_log.txt and triton_cache.tgz
# (gpu_setup.sh). Afterwards, here:
#   mkdir -p .probes_runs && cp FILES_AT/probes_manifest.jsonl FILES_AT/probes_checkpoints.pt .probes_runs/
#   cp FILES_AT/probes_manifest.jsonl FILES_AT/probes.md results/      # commit these two
#   .venv/bin/prism-rec probe --grid --out results --log-manifest   # into MLflow
set -uo pipefail
out=${1:?usage: benchmarks/probes_gpu.sh OUT_DIR [PREVIOUS_DIR]}
previous=${2:-.probes_runs}
: "${PRISM_REC_GIT_COMMIT:?set PRISM_REC_GIT_COMMIT to the commit this tree is (the copy has no .git)}"
export PRISM_REC_GIT_COMMIT
PRISM_REC_MPS=${PRISM_REC_MPS:-1}
. benchmarks/gpu_setup.sh || exit 1
mkdir -p "$out"
if [ -f "$previous/probes_manifest.jsonl" ]; then
    cp "$previous/probes_manifest.jsonl" "$out/"
    if [ -f "$previous/probes_checkpoints.pt" ]; then cp "$previous/probes_checkpoints.pt" "$out/"; fi
elif [ -f results/probes_manifest.jsonl ]; then
    cp results/probes_manifest.jsonl "$out/"
fi
gpus=$(nvidia-smi --query-gpu=index --format=csv,noheader | sed 's/^/cuda:/' | paste -sd, -)
device=${DEVICE:-$gpus}
workers=${WORKERS:-$((15 * $(echo "$device" | tr ',' '\n' | wc -l)))}
compile=${COMPILE:-graphs}
status=0
sources=$(find prism_rec kernels baselines -name '*.py' | sort | xargs cat | sha1sum | cut -c1-16)
checked=/tmp/prism_rec_probe_check_${sources}_$compile
if [ "$compile" != off ] && [ -f "$checked" ]; then
    echo "compile check skipped: passed in an earlier call on this machine for the same sources ($checked)" \
        | tee "$out/probes_check.txt"
elif [ "$compile" != off ]; then
    check_seconds=${CHECK_SECONDS:-$(if [ "$compile" = graphs ]; then echo 150; else echo 300; fi)}
    timeout "$check_seconds" python3 -m prism_rec.cli probe --grid --device "${device%%,*}" --compile "$compile" --check-compile \
        > "$out/probes_check.txt" 2>&1
    status=$?
    tail -n 12 "$out/probes_check.txt"
    if [ $status = 0 ]; then touch "$checked"; fi
fi
budget=${BUDGET:-$((${CALL_SECONDS:-525} - SECONDS))}
if [ $status = 0 ]; then
    timeout $((budget + 30)) python3 -m prism_rec.cli probe --grid --device "$device" --workers "$workers" \
        --compile "$compile" --time-budget "$budget" --checkpoint-limit "${CHECKPOINT_MIB:-15}" --out "$out" \
        --no-mlflow > "$out/probes_log.txt" 2>&1
    status=$?
fi
prism_rec_stop_mps
grep -E "probe runs to do|^skipped \(already in manifest\)|FAILED" "$out/probes_log.txt" 2>/dev/null | head -n 20
grep -E "planned runs have finished" "$out/probes.md" 2>/dev/null
prism_rec_return_triton_cache "$out"
exit $status
