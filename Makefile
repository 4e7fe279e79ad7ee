# prism-rec: `make bench` sets everything up and runs the default benchmark; `make test` runs the tests.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
TORCH_SPEC ?= torch==2.13.0
TRITON_SPEC ?= triton==3.7.1

DATASET ?= ml-100k
MODELS ?= sasrec,gated_deltanet,prism
SEEDS ?= 1
EPOCHS ?= 50
ARGS ?=

.PHONY: install bench test tables ui data list

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip "setuptools<81" wheel
	$(BIN)/python -m pip install --quiet "$(TORCH_SPEC)" "$(TRITON_SPEC)"
	$(BIN)/python -m pip install --quiet --no-build-isolation -e ".[test]"
	touch $(STAMP)

install: $(STAMP)

bench: install
	$(BIN)/prism-rec bench --dataset $(DATASET) --models $(MODELS) --seeds $(SEEDS) --epochs $(EPOCHS) $(ARGS)

test: install
	$(BIN)/python -m pytest -q

tables: install
	$(BIN)/prism-rec tables

ui: install
	$(BIN)/prism-rec ui

data: install
	$(BIN)/prism-rec data download --dataset $(DATASET)
	$(BIN)/prism-rec data prepare --dataset $(DATASET)

list: install
	$(BIN)/prism-rec list --params
