# prism-rec: `make bench` sets everything up and runs the default benchmark; `make test` runs the tests.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
TORCH_SPEC ?= torch==2.13.0
TRITON_SPEC ?= triton==3.7.1
# TORCH_INDEX=https://download.pytorch.org/whl/cpu takes PyTorch's CPU-only build from its own index (PyPI's
# Linux build for 3.12/3.13 carries CUDA's libraries; README, "Set-up").
TORCH_INDEX ?=
# recbole goes in without its dependency list (pyproject.toml says why); prism_rec/data/movielens.py names this pin.
RECBOLE_SPEC ?= recbole==1.2.1
# The other Pythons whose resolution `make check-deps` (and CI) checks without installing anything.
CHECK_PYTHONS ?= 3.12 3.13

DATASET ?= ml-100k
MODELS ?= sasrec,gated_deltanet,prism
SEEDS ?= 1
# A first look that ends in minutes on a 2-core CPU (README, "How long make bench takes"): at most 10 epochs,
# patience 3, the headline's batch 256 and rate 3e-3 (its choice for gated_deltanet and prism on ml-100k).
# For longer runs: make bench EPOCHS=50 PATIENCE=5 LR=1e-3 BATCH_SIZE=128 (the CLI's defaults).
EPOCHS ?= 10
PATIENCE ?= 3
LR ?= 3e-3
BATCH_SIZE ?= 256
ARGS ?=
PROBE_ARGS ?=
THROUGHPUT_ARGS ?=
# RESUME=1 continues every interrupted run of the same settings from its checkpoint (prism-rec bench --resume).
RESUME ?= 0
# NPROC=N trains data-parallel in N processes through torchrun; TORCHRUN_ARGS replaces --standalone
# for several machines (--nnodes, --node-rank, --rdzv-backend, --rdzv-endpoint, --rdzv-id).
NPROC ?=
TORCHRUN_ARGS ?= --standalone

ifneq ($(filter-out 0 1,$(RESUME)),)
$(error RESUME must be 0 or 1, got '$(RESUME)')
endif
ifneq ($(NPROC),)
ifneq ($(shell echo '$(NPROC)' | grep -Ex '[1-9][0-9]*'),$(NPROC))
$(error NPROC must be a positive number of processes, got '$(NPROC)')
endif
endif

# PROTOCOL=authors: the PRISM authors' destination retrieval (prism-rec bench --protocol authors, README "The
# authors' protocol"); it has its own defaults (10 epochs, patience 5, Adam 1e-4, batch 256), so only the settings
# given to make (on its command line or in the environment) reach it.
PROTOCOL ?= next-item
ifeq ($(filter next-item authors,$(PROTOCOL)),)
$(error PROTOCOL must be next-item or authors, got '$(PROTOCOL)')
endif
given = $(if $(filter command line environment%,$(origin $(1))),$(2) $($(1)))

ifeq ($(PROTOCOL),authors)
BENCH_ARGS = --protocol authors --dataset $(DATASET) --models $(MODELS) --seeds $(SEEDS) $(call given,EPOCHS,--epochs) \
	$(call given,PATIENCE,--patience) $(call given,LR,--lr) $(call given,BATCH_SIZE,--batch-size) \
	$(if $(filter 1,$(RESUME)),--resume) $(ARGS)
else
BENCH_ARGS = --dataset $(DATASET) --models $(MODELS) --seeds $(SEEDS) --epochs $(EPOCHS) --patience $(PATIENCE) \
	--lr $(LR) --batch-size $(BATCH_SIZE) \
	$(if $(filter 1,$(RESUME)),--resume) $(ARGS)
endif
BENCH_LAUNCHER = $(if $(NPROC),$(BIN)/torchrun $(TORCHRUN_ARGS) --nproc-per-node=$(NPROC) -m prism_rec.cli,$(BIN)/prism-rec)

.PHONY: install check-deps bench lint test test-ui tables import-runs ui data list probe throughput reliability

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip "setuptools<81" wheel
	$(BIN)/python -m pip install --quiet $(if $(TORCH_INDEX),--index-url $(TORCH_INDEX) --extra-index-url \
		https://pypi.org/simple) "$(TORCH_SPEC)" "$(TRITON_SPEC)"
	$(BIN)/python -m pip install --quiet --no-build-isolation -e ".[test,recbole]"
	$(BIN)/python -m pip install --quiet --no-deps "$(RECBOLE_SPEC)"
	touch $(STAMP)

install: $(STAMP)

# Resolves the dependency set for $(CHECK_PYTHONS) with pip --dry-run (wheel metadata only, no torch download).
check-deps:
	$(PYTHON) .ci/resolve.py $(foreach v,$(CHECK_PYTHONS),--python $(v)) --spec "$(TORCH_SPEC)" \
		--spec "$(TRITON_SPEC)" --no-deps-spec "$(RECBOLE_SPEC)"

bench: install
	$(BENCH_LAUNCHER) bench $(BENCH_ARGS)

# pyflakes, pycodestyle errors, bugbear and a complexity limit ([tool.ruff] in pyproject.toml).
lint: install
	$(BIN)/ruff check .

# One pytest worker per core (pytest-xdist; CI has 2; work stealing keeps every worker busy to the end):
# 11 min instead of 19 on 2 cores. TEST_WORKERS=0 runs the suite in this process.
TEST_WORKERS ?= auto
test: install
	$(BIN)/python -m pytest -q -n $(TEST_WORKERS) --dist worksteal --ignore=tests/ui

# Headless chromium opens every link `make ui` prints and asserts on what it shows (needs Debian's chromium:
# apt-get install chromium; else the test skips); screenshots in build/ui/. Not part of `make test` or .ci/run.
test-ui: install
	PRISM_REC_TEST_UI=1 $(BIN)/python -m pytest -q tests/ui

tables: install
	$(BIN)/prism-rec tables

# Log JSON run records made where MLflow is absent (the GPU grid of prism-rec headline) into the store.
import-runs: install
	$(BIN)/prism-rec import-runs $(DIR)

ui: install
	$(BIN)/prism-rec ui

data: install
	$(BIN)/prism-rec data download --dataset $(DATASET)
	$(BIN)/prism-rec data prepare --dataset $(DATASET)

list: install
	$(BIN)/prism-rec list --params

# The reliability sweep (CPU, minutes): hostile options, names, damaged checkpoints, kills and overlapping benches,
# each probe's command, expected and observed outcome rewritten into results/reliability.md.
reliability: install
	$(BIN)/python benchmarks/reliability.py

# Mechanistic probes (paper Table 4); PROBE_ARGS e.g. "--tasks parity --models prism:L=2 --steps 10000".
probe: install
	$(BIN)/prism-rec probe $(PROBE_ARGS)

# Training tokens/s and peak memory of every backbone (tiny configuration on CPU, paper shapes on CUDA).
throughput: install
	$(BIN)/prism-rec throughput $(THROUGHPUT_ARGS)
