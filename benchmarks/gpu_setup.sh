# Source this on an offline GPU machine that received a copy of this tree (as the device tool sends it):
#   . benchmarks/gpu_setup.sh
# It installs the wheels carried under .whl/<group>/ (packages the machine's image lacks) into /tmp/site
# and this project (editable, no dependencies) into the machine's Python, points the shared-subset loader
# at .device_data (a copy of ../shared/data) and Triton at the carried .triton_cache. The wheels were
# fetched here for the machine's Python 3.12 (x86-64) with
#   pip download --only-binary=:all: --python-version 3.12 --implementation cp \
#       --platform manylinux_2_28_x86_64 --platform manylinux2014_x86_64 -d DIR PACKAGE==VERSION
# .whl/mlflow: mlflow-skinny 3.17.2 with the needs its image lacks (alembic, sqlalchemy, pydantic,
# opentelemetry, databricks-sdk, ...; enough for `make bench` on a sqlite store, not for the UI server);
# .whl/fla: fla-core 0.6.0 (--no-deps); .whl/recbole: recbole 1.2.1 (--no-deps; it ships ml-100k).
# Sourced again on the same machine (a script started by a shell that already sourced it), it installs
# nothing twice. PRISM_REC_MPS=1 also starts the CUDA MPS daemon; PRISM_REC_MPS=0 with CUDA_MPS_PIPE_DIRECTORY
# exported joins a daemon a parent shell started, so that two device scripts can share one GPU (only the
# shell that started a daemon stops it: prism_rec_stop_mps). Sourced, it leaves the caller's shell options
# alone; it returns 1 when an install fails. It also defines prism_rec_return_triton_cache (below), which
# the device scripts call last.
_prism_rec_gpu_setup() {
    local wheels installed=/tmp/prism_rec_installed
    wheels=$(find .whl -type f -name '*.whl' 2>/dev/null | sort)
    # what this machine installed last (the wheels and this tree's path): the same again is skipped
    if [ "$(cat "$installed" 2>/dev/null)" != "$PWD $wheels" ]; then
        if [ -n "$wheels" ]; then
            # shellcheck disable=SC2086  # one argument per wheel
            python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
                --target /tmp/site $wheels || return 1
        fi
        python3 -m pip install -q --no-deps --no-build-isolation -e . > /tmp/pip_project.log 2>&1 \
            || { cat /tmp/pip_project.log; return 1; }
        echo "$PWD $wheels" > "$installed"
    fi
    if [ -n "$wheels" ] && [[ ":${PYTHONPATH:-}:" != *:/tmp/site:* ]]; then
        export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
    fi
    export PRISM_REC_SHARED_DATA=$PWD/.device_data TRITON_CACHE_DIR=$PWD/.triton_cache PYTHONUNBUFFERED=1
    mkdir -p "$TRITON_CACHE_DIR"
    nvidia-smi --query-gpu=index,name,memory.total --format=csv,noheader || true
    if [ "${PRISM_REC_MPS:-0}" = 1 ]; then
        # CUDA MPS lets the kernels of the many training processes on one GPU run side by side instead of
        # taking turns (time slices); the processes of this shell find the daemon through the pipe folder.
        export CUDA_MPS_PIPE_DIRECTORY=/tmp/mps-pipe CUDA_MPS_LOG_DIRECTORY=/tmp/mps-log
        mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
        # a daemon left by an earlier call on a warm machine (one cut off before its quit) goes first
        echo quit | nvidia-cuda-mps-control > /dev/null 2>&1 && sleep 2
        if nvidia-cuda-mps-control -d && timeout 120 python3 -c "import torch
n = torch.cuda.device_count()
assert n > 0, 'no CUDA device through MPS'
[torch.ones(1, device=f'cuda:{i}').sum().item() for i in range(n)]"
        then
            echo "CUDA MPS daemon started; a client reached every GPU through it"
            _PRISM_REC_MPS_STARTED=1
        else
            echo "CUDA MPS did not start or serve a client; the processes will share the GPUs by time slices"
            echo quit | nvidia-cuda-mps-control 2>/dev/null
            unset CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY
        fi
    fi
}
_prism_rec_gpu_setup

# prism_rec_stop_mps: stops the CUDA MPS daemon if this shell started it (not one it joined)
prism_rec_stop_mps() {
    if [ "${_PRISM_REC_MPS_STARTED:-0}" = 1 ]; then
        echo quit | nvidia-cuda-mps-control
        _PRISM_REC_MPS_STARTED=0
    fi
}

# prism_rec_return_triton_cache DIR: the Triton cache (what this call compiled and what was carried in) as
# DIR/triton_cache.tgz, so that the next call, carrying it back as .triton_cache, does not compile the same
# kernels again (only what a call writes under $OUT comes back). Left out, with a line saying so, above
# TRITON_CACHE_RETURN_MIB (default 15) compressed. Here, afterwards:
#   mkdir -p .triton_cache && tar -xzf FILES_AT/triton_cache.tgz -C .triton_cache
prism_rec_return_triton_cache() {
    local archive="$1/triton_cache.tgz" limit_mib=${TRITON_CACHE_RETURN_MIB:-15}
    tar -czf "$archive" -C "$TRITON_CACHE_DIR/" . 2>/dev/null || { rm -f "$archive"; return 0; }
    if [ "$(stat -c %s "$archive")" -gt $((limit_mib * 1048576)) ]; then
        echo "Triton cache not returned: $(du -h "$archive" | cut -f1) compressed, over $limit_mib MiB"
        rm -f "$archive"
    fi
}
