#!/usr/bin/env bash
# One device call (device tool, kind nvidia-h200; carry .whl and .device_data) that runs the cross-
# implementation check, RecBole's SASRec against ours, on ml-100k and electronics-gerec (benchmarks/
# recbole_check.py says how: a rate grid on seed 0 for each side, seeds 0-2 at the chosen rate, early
# stopping), JOBS runs at once on the one GPU under CUDA MPS, in about 9 minutes (BUDGET seconds of runs plus
# about a minute of set-up):
#
#   PRISM_REC_GIT_COMMIT=<short hash> benchmarks/recbole_gpu.sh $OUT     (device tool: timeout_s 600)
#
# .whl/recbole must hold recbole 1.2.1 and the modules of prism_rec/recbole_bridge/compat.py's
# REQUIRED_MODULES that the image lacks: on the H200 image (Python 3.12.3, checked 2026-12-03) colorlog and
# texttable (it has colorama 0.4.6, tensorboard 2.21.0, protobuf, absl-py, scikit-learn, tqdm, pyyaml),
# fetched with gpu_setup.sh's pip download line, --no-deps, into .whl/recbole: colorlog==4.7.2 texttable==1.7.2
# (two small py3-none-any wheels), and pandas==2.3.3 with the pytz==2025.2 and tzdata==2025.2 it needs: the
# image's pandas is 3, under which RecBole's dataset cannot be built (compat.py's VERSION_CAPS says why). The
# script stops before any work, naming what is still missing or too new.
# DATASETS (default ml-100k,electronics-gerec), SEEDS (default 3), LR_GRID (default 3e-4,1e-3,3e-3), JOBS
# (default 14), BUDGET (default 470) and EXPECTED_EPOCHS (default 25: the epochs a run is expected to take
# before one of its kind has finished: RecBole's SASRec on ml-100k at lr 1e-3 had its best epoch at 13,
# issue 42, so about 18 at patience 5) change the check. OUT receives recbole_check.md (copy it to
# results/recbole_check.md), recbole_check_log.txt and recbole_check_runs.tgz, the finished runs: where the
# report lists runs without a result, unpack it here (mkdir -p build && tar -xzf
# FILES_AT/recbole_check_runs.tgz -C build), carry build/recbole_check too and run the script again: the
# finished runs are reused, the others train.
set -uo pipefail
out=${1:?usage: benchmarks/recbole_gpu.sh OUT_DIR}
: "${PRISM_REC_GIT_COMMIT:?set PRISM_REC_GIT_COMMIT to the commit this tree is (the copy has no .git): each run records it}"
export PRISM_REC_GIT_COMMIT
PRISM_REC_MPS=${PRISM_REC_MPS:-1}
. benchmarks/gpu_setup.sh || exit 1
python3 -c "
from prism_rec.recbole_bridge.compat import unmet_requirements
unmet = unmet_requirements()
if unmet:
    raise SystemExit('the RecBole check needs ' + ', '.join(unmet) + ': pip download them (gpu_setup.sh says '
                     'how, --no-deps) into .whl/recbole and carry .whl')
from prism_rec.recbole_bridge.compat import import_recbole
import_recbole()
from torch.utils.tensorboard import SummaryWriter
print('RecBole and its imports are here')
" || { prism_rec_stop_mps; exit 1; }
mkdir -p "$out" build
budget=${BUDGET:-470}
timeout $((budget + 60)) python3 benchmarks/recbole_check.py --datasets "${DATASETS:-ml-100k,electronics-gerec}" \
    --seeds "${SEEDS:-3}" --lr-grid "${LR_GRID:-3e-4,1e-3,3e-3}" --device cuda --jobs "${JOBS:-14}" \
    --expected-epochs "${EXPECTED_EPOCHS:-25}" --budget "$budget" --out "$out/recbole_check.md" \
    --runs-dir build/recbole_check 2>&1 \
    | tee "$out/recbole_check_log.txt"
status=${PIPESTATUS[0]}
prism_rec_stop_mps
tar -czf "$out/recbole_check_runs.tgz" -C build recbole_check 2>/dev/null
exit "$status"
