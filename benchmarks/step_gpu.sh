#!/usr/bin/env bash
# Eager against compiled training steps (issue 19) on every GPU of the machine, in one device call:
#   . benchmarks/gpu_setup.sh && bash benchmarks/step_gpu.sh "$OUT/step" [BUDGET_SECONDS] [EXTRA STEP_BENCH ARGS]
# Four runs of benchmarks/step_bench.py (steps at T 50 of the backbones with the compiled-vs-eager
# checks and Books scale; T 50 of the others; T 200 of all; solo throughput on three headline datasets,
# eager and compiled), spread over the GPUs (one each on 4 GPUs; in turn, sharing the budget, on fewer),
# each starting no cell after its share of BUDGET_SECONDS (default 360), all of them killed once
# BUDGET_SECONDS + 120 s have passed (so the merge always runs), then merged into OUT/step.md, step.csv,
# step.json and solo_throughput.csv, with every run's log in OUT/log.txt (5 files). Extra arguments go
# to every run (last wins: a CPU test passes tiny shapes).
set -u
out=${1:?usage: step_gpu.sh OUT [BUDGET_SECONDS] [EXTRA ARGS]}
budget=${2:-360}
shift $(( $# >= 2 ? 2 : 1 ))
python=${PYTHON:-python3}
work=$(mktemp -d /tmp/step_gpu.XXXX)
mkdir -p "$out"
gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
lanes=$(( gpus > 4 ? 4 : (gpus < 1 ? 1 : gpus) ))
names=(t50-main t200 t50-rest solo)
args=(
    "--lengths 50 --models sasrec,gated_deltanet,prism,mamba2 --books-models sasrec --check-compiled prism,mamba2"
    "--lengths 200 --models sasrec,gated_deltanet,prism,mamba2,ttt-linear,titans,hstu,transformer++ --profile-steps 0 --books-models= --check-compiled="
    "--lengths 50 --models ttt-linear,titans,hstu,transformer++ --books-models= --check-compiled="
    "--no-steps --datasets ml-100k,electronics-gerec,movies-long --models sasrec,gated_deltanet,prism,mamba2 --solo-compile off,cudagraphs --check-compiled="
)
common="--loss-path fused --compile off,graphs,cudagraphs --warmup 4 --steps 10 --cell-seconds 2 --profile-steps 3 --solo-warmup 4 --solo-steps 15"
deadline=$(( $(date +%s) + budget + 120 ))
per_lane=$(( (${#names[@]} + lanes - 1) / lanes ))
share=$(( budget / per_lane ))
export TORCHINDUCTOR_COMPILE_THREADS=$(( $(nproc) / lanes > 1 ? $(nproc) / lanes : 1 ))
for lane in $(seq 0 $(( lanes - 1 ))); do
    (
        for index in $(seq "$lane" "$lanes" $(( ${#names[@]} - 1 ))); do
            name=${names[$index]}
            left=$(( deadline - $(date +%s) ))
            [ "$left" -gt 10 ] || { echo "not started: no time left" > "$work/$name.log"; continue; }
            # shellcheck disable=SC2086  # one word per argument
            CUDA_VISIBLE_DEVICES=$lane timeout "$left" "$python" benchmarks/step_bench.py \
                $common ${args[$index]} --time-budget "$share" --out-dir "$work/$name" "$@" > "$work/$name.log" 2>&1
            echo "exit status $?" >> "$work/$name.log"
        done
    ) &
done
wait
runs=$(printf "$work/%s," "${names[@]}")
"$python" benchmarks/step_bench.py --merge "${runs%,}" --out-dir "$out" > "$work/merge.log" 2>&1
for name in "${names[@]}" merge; do
    echo "===== $name (last 300 lines) ====="
    tail -n 300 "$work/$name.log"
done > "$out/log.txt"
tail -n 5 "$out/log.txt"
