# Source this on an offline GPU machine that received a copy of this tree (as the device tool sends it):
#   . benchmarks/gpu_setup.sh
# It installs the wheels carried under .whl/<group>/ (packages the machine's image lacks: mlflow-skinny
# and its needs, fla-core, recbole; see results/README.md for how they were fetched) into /tmp/site and
# this project (editable, no dependencies) into the machine's Python, points the shared-subset loader at
# .device_data (a copy of ../shared/data) and Triton at the carried .triton_cache.
set -euo pipefail
wheels=$(find .whl -type f -name '*.whl' 2>/dev/null | sort || true)
if [ -n "$wheels" ]; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site $wheels
    export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
fi
python3 -m pip install -q --no-deps --no-build-isolation -e . > /tmp/pip_project.log 2>&1 \
    || { cat /tmp/pip_project.log; exit 1; }
export PRISM_REC_SHARED_DATA=$PWD/.device_data TRITON_CACHE_DIR=$PWD/.triton_cache PYTHONUNBUFFERED=1
mkdir -p "$TRITON_CACHE_DIR"
nvidia-smi --query-gpu=index,name,memory.total --format=csv,noheader
