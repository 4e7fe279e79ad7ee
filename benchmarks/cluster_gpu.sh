#!/usr/bin/env bash
# One device call (device tool, kind nvidia-h200; carry .device_data, .whl and .triton_cache) that runs a
# slice of the headline grid through the dask executor and then through the local pool, 12 runs at once on
# the one GPU either way under CUDA MPS (benchmarks/cluster_bench.py says how), in about 7 minutes:
#
#   PRISM_REC_GIT_COMMIT=<short hash> benchmarks/cluster_gpu.sh OUT_DIR
#
# .whl must hold the wheels of dask and the needs the machine's image lacks (.whl/dask: dask 2026.8.0,
# distributed 2026.8.0, tornado 6.6.1, tblib 3.2.2, zict 3.0.0, partd 1.4.2, locket 1.0.0; about 3 MB; the
# image has click, cloudpickle, fsspec, jinja2, msgpack, packaging, psutil, pyyaml, sortedcontainers, toolz
# and urllib3), fetched with gpu_setup.sh's pip download line, --no-deps, into .whl/dask.
# DATASETS (default ml-100k), MODELS (default pop,sasrec,gated_deltanet,mamba2,hstu,prism,prism-L0,prism-L1:
# the bases' rate grids on seed 0, then seeds 1 and 2 at the chosen rates) and SEEDS (default 3) choose the
# slice, at the headline's own settings; RUNS_PER_GPU (default 12) the runs at once; BUDGET (default 150)
# the seconds each side may start runs. OUT_DIR receives cluster_bench.md and .json (the results: runs
# per GPU-hour of each, whether the runs both finished have identical metrics), each side's manifest and
# driver log, the dask workers' log and triton_cache.tgz (gpu_setup.sh).
set -uo pipefail
out=${1:?usage: benchmarks/cluster_gpu.sh OUT_DIR}
: "${PRISM_REC_GIT_COMMIT:?set PRISM_REC_GIT_COMMIT to the commit this tree is (the copy has no .git)}"
export PRISM_REC_GIT_COMMIT
PRISM_REC_MPS=${PRISM_REC_MPS:-1}
. benchmarks/gpu_setup.sh || exit 1
python3 -c "import distributed" || { echo "distributed does not import: .whl/dask is missing or incomplete"; exit 1; }
mkdir -p "$out"
datasets=${DATASETS:-ml-100k}
budget=${BUDGET:-150}
work=/tmp/cluster_bench
rm -rf "$work"
# the dataset caches, made before either side starts its clock
python3 -c "import sys; from prism_rec.data.sources import load_dataset; [load_dataset(n) for n in sys.argv[1:]]" \
    ${datasets//,/ } || exit 1
timeout $((2 * budget + 200)) python3 benchmarks/cluster_bench.py --out "$work" --datasets "$datasets" \
    --models "${MODELS:-pop,sasrec,gated_deltanet,mamba2,hstu,prism,prism-L0,prism-L1}" --seeds "${SEEDS:-3}" \
    --runs-per-device "${RUNS_PER_GPU:-12}" --device cuda --budget "$budget"
status=$?
prism_rec_stop_mps
cp "$work"/cluster_bench.md "$work"/cluster_bench.json "$out/" 2>/dev/null
for side in dask local; do
    cp "$work/$side/headline_v2_manifest.jsonl" "$out/${side}_manifest.jsonl" 2>/dev/null
    cp "$work/$side/headline_log.txt" "$out/${side}_headline_log.txt" 2>/dev/null
done
tail -n 3000 "$work/dask/workers_log.txt" > "$out/dask_workers_log.txt" 2>/dev/null
prism_rec_return_triton_cache "$out"
exit $status
