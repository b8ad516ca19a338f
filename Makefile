# tfk8s — a newcomer needs two commands: `make run` and `make test`.
PYTHON ?= python3.11
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
IMAGE  ?= ghcr.io/tfk8s/tfk8s:0.1.0
# Extra pipeline parameters for `make run`, e.g. ARGS="--param epochs=1 --param workers=3"
ARGS   ?=

.PHONY: run test test-fast lint compile bench image clean

$(STAMP): pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev]'
	@touch $(STAMP)

# Runs the whole pipeline on this machine (kfp.local, replicas as local processes) on real MNIST.
run: $(STAMP)
	$(PY) pipelines/train.py --local $(ARGS)

test: $(STAMP)
	$(PY) -m pytest -q -ra

# Skips the tests that train with TensorFlow.
test-fast: $(STAMP)
	$(PY) -m pytest -q -ra -m "not slow"

lint: $(STAMP)
	$(VENV)/bin/ruff check .

compile: $(STAMP)
	$(PY) pipelines/train.py --compile
	$(PY) pipelines/train.py --compile --format argo

bench: $(STAMP)
	$(PY) bench/worker_scaling.py

image:
	docker build -t $(IMAGE) .

# Removes caches only: ./volume holds your runs, exported and served models (rm -rf volume yourself).
clean:
	rm -rf local_outputs .pytest_cache .ruff_cache
