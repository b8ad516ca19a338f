# tfk8s — a newcomer needs two commands: `make run` and `make test`.
PYTHON ?= python3.11
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
# The project image's variant (make image VARIANT=gpu): cpu (tensorflow-cpu, the default image) or gpu
# (TensorFlow's CUDA build, what a replica type with gpus > 0 runs); IMAGE is the variant's tag.
VARIANT ?= cpu
ifeq ($(VARIANT),gpu)
IMAGE  ?= ghcr.io/tfk8s/tfk8s:0.1.0-gpu
endif
IMAGE  ?= ghcr.io/tfk8s/tfk8s:0.1.0
# Extra pipeline parameters for `make run`, e.g. ARGS="--param epochs=1 --param workers=3"
ARGS   ?=

.PHONY: run test test-fast test-cluster test-e2e test-argo test-kfp lint compile bench bench-smoke image image-archive image-smoke clean

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

# The Kubernetes backend against a real control plane on 127.0.0.1 (etcd, kube-apiserver, controller manager,
# scheduler, KWOK): builds the binaries once from the Go module proxy (hack/controlplane/build.sh, cached under
# ~/.cache/tfk8s/controlplane/; needs Go >= 1.26), Kueue v0.17.0's manager (hack/kueue/build.sh, cached under
# ~/.cache/tfk8s/kueue/) and KServe's InferenceService CRD from its Go module (hack/kserve/crd.sh, cached under
# ~/.cache/tfk8s/kserve/), then runs the tests marked `cluster` (tests/realcluster/test_kueue.py with the real Kueue).
test-cluster: $(STAMP)
	bash hack/controlplane/build.sh
	bash hack/kueue/build.sh
	bash hack/kserve/crd.sh
	TFK8S_TEST_CLUSTER=1 $(PY) -m pytest -q -ra -m cluster

# Real containers on a real one-node cluster on this machine (root): the control plane above plus a kubelet,
# containerd + runc + CNI, kube-proxy and CoreDNS (hack/node/build.sh: built once from the Go module proxy and
# Debian's packages, cached under ~/.cache/tfk8s/node/), Kueue v0.17.0's manager (hack/kueue/build.sh, as for
# test-cluster: the production-shaped namespaces' queue), Argo Workflows v3.7.3's controller, executor and CLI
# (hack/argo/build.sh, cached under ~/.cache/tfk8s/argo/), MinIO (hack/kfp/build.sh --minio: the bucket the
# pipeline reads its data from and uploads its model to), KServe's CRD (hack/kserve/crd.sh) and the project image
# (image-archive, below: cached, seconds when only .py files changed), which the tests import into the node's
# containerd; then the tests marked
# `e2e`: tests/realnode/test_*.py (the launch step in a pod) and tests/realnode/test_argo.py (the exported pipeline and
# CronWorkflow run by the real Argo controller), on one cluster. The session's teardown leaves the machine as it
# found it; `hack/node/cleanup.sh --check` after it proves it (cleanup.sh without --check undoes what a killed
# run left). test-argo: the same, the Argo scenarios only.
E2E_NODE = TFK8S_TEST_E2E=1 TFK8S_E2E_IMAGE_ARCHIVE=$(IMAGE_ARCHIVE) $(PY) -m pytest -q -ra --durations=0 -m e2e
E2E_BUILD = bash hack/controlplane/build.sh && bash hack/kueue/build.sh && bash hack/node/build.sh \
	&& bash hack/argo/build.sh && bash hack/kfp/build.sh --minio && bash hack/kserve/crd.sh \
	&& $(MAKE) --no-print-directory image-archive
test-e2e: $(STAMP)
	$(E2E_BUILD)
	$(E2E_NODE); rc=$$?; bash hack/node/cleanup.sh --check || rc=1; exit $$rc

test-argo: $(STAMP)
	$(E2E_BUILD)
	$(E2E_NODE) tests/realnode/test_argo.py; rc=$$?; bash hack/node/cleanup.sh --check || rc=1; exit $$rc

# Kubeflow Pipelines 2.17.0 for real (docs/kfp.md, "What a real KFP showed"): needs a KFP source tree, named by
# KFP_SRC=<a checkout of kubeflow/pipelines at 2.17.0> or unpacked at ~/.cache/tfk8s/kfp/src-2.17.0 (never put into
# this repository); without one it says so in one line and skips (exit 0). With one: hack/kfp/build.sh builds the
# five KFP Go programs from it (cached under ~/.cache/tfk8s/kfp/2.17.0/), hack/kfp/mlmd_venv.sh makes ML Metadata's
# environment (the PyPI ml-metadata wheel, served by hack/kfp/mlmd_server.py), hack/kfp/mariadb.sh unpacks Debian's
# MariaDB 10.11 (the API server's database; nothing installed), hack/kfp/ui.sh builds KFP's UI from the same tree
# (npm; cached), Debian's Chromium is installed when missing (hack/kfp/chromium.sh, first: apt-get; where it cannot
# be, the target fails at once saying what to install) and Playwright is installed into .venv to drive it, then the tests
# marked `kfp` run: the adapter's own test, tests/realnode/test_kfp.py and test_kfp_ui.py on the cluster of test-e2e.
PLAYWRIGHT_VERSION = 1.65.2
KFP_SRC_HINT = set KFP_SRC=<a checkout of kubeflow/pipelines at 2.17.0> (or unpack one at ~/.cache/tfk8s/kfp/src-2.17.0)
test-kfp: $(STAMP)
	@if ! bash hack/kfp/build.sh --src >/dev/null 2>&1; then \
	    echo "test-kfp skipped: no Kubeflow Pipelines source tree: $(KFP_SRC_HINT)"; exit 0; fi; \
	set -e; bash hack/kfp/chromium.sh; bash hack/kfp/build.sh; bash hack/kfp/mlmd_venv.sh; bash hack/kfp/mariadb.sh; $(E2E_BUILD); set +e; \
	bash hack/kfp/ui.sh || echo "test-kfp: the KFP UI could not be built (above); tests/realnode/test_kfp_ui.py skips"; \
	$(PY) -m pip install --quiet playwright==$(PLAYWRIGHT_VERSION) \
	    || echo "test-kfp: playwright could not be installed; tests/realnode/test_kfp_ui.py skips"; \
	TFK8S_TEST_KFP=1 TFK8S_E2E_IMAGE_ARCHIVE=$(IMAGE_ARCHIVE) $(PY) -m pytest -q -ra --durations=0 -m kfp; rc=$$?; \
	bash hack/node/cleanup.sh --check || rc=1; exit $$rc

# Skips the tests that train with TensorFlow.
test-fast: $(STAMP)
	$(PY) -m pytest -q -ra -m "not slow"

lint: $(STAMP)
	$(VENV)/bin/ruff check .

compile: $(STAMP)
	$(PY) pipelines/train.py --compile
	$(PY) pipelines/train.py --compile --format argo
	$(PY) pipelines/train.py --compile --format argo --schedule '0 2 * * *'

# Benchmarks printing ratios (README, "Benchmarks"): one line per figure, each also appended to $(BENCH_OUT).
BENCHES   := trainer_overhead worker_scaling input_headroom pipeline_overhead data_reuse launcher_scale time_to_accuracy real_node two_nodes kfp_overhead
BENCH_OUT ?= volume/bench-results.jsonl
bench: $(STAMP)
	@mkdir -p $(dir $(BENCH_OUT))
	@for b in $(BENCHES); do echo "== bench/$$b.py"; $(PY) bench/$$b.py --out $(BENCH_OUT) || exit 1; done
	$(PY) bench/table.py $(BENCH_OUT)

# The same at tiny sizes: every benchmark run once (tests/project/test_bench_smoke.py, marked bench and left out of
# `make test`), checking that its figures appear and parse; about 2 minutes. .ci/run runs it.
bench-smoke: $(STAMP)
	TFK8S_TEST_BENCH=1 $(PY) -m pytest -q -ra -m bench

# The project image, tagged $(IMAGE), of VARIANT cpu (default) or gpu (above). With a Docker engine: docker build
# (base: the Dockerfile's default, python:3.11-slim-bookworm; BASE=<ref> for another). Without one (BUILDER=buildah to choose it anyway):
# hack/image/build.sh, buildah with no daemon on a Debian bookworm base made here by mmdebstrap (BASE=local,
# its default, or BASE=<ref> of an image in its store), cached under ~/.cache/tfk8s/image/ (hack/image/README.md).
# image-archive writes the image as a docker-archive tar for `ctr -n k8s.io images import` and prints its path.
BASE          ?=
BUILDER       ?=
IMAGE_CACHE   ?= $(or $(XDG_CACHE_HOME),$(HOME)/.cache)/tfk8s/image
IMAGE_ARCHIVE ?= $(IMAGE_CACHE)/$(subst :,_,$(notdir $(IMAGE))).tar
comma := ,
image:
	@case "$(VARIANT)" in cpu|gpu) ;; *) echo "make image: VARIANT=cpu or VARIANT=gpu, not '$(VARIANT)'" >&2; exit 2 ;; esac
	@if [ "$(BUILDER)" = docker ] || { [ -z "$(BUILDER)" ] && docker info >/dev/null 2>&1; }; then \
	    set -x; docker build $(if $(BASE),--build-arg BASE=$(BASE)) --build-arg VARIANT=$(VARIANT) \
	        $(if $(PIP_CERT),--secret id=pip_cert$(comma)src=$(PIP_CERT)) -t $(IMAGE) . ; \
	else \
	    set -x; bash hack/image/build.sh --variant $(VARIANT) --image $(IMAGE) $(if $(BASE),--base $(BASE)); \
	fi

image-archive:
	bash hack/image/build.sh --variant $(VARIANT) --image $(IMAGE) $(if $(BASE),--base $(BASE)) --archive $(IMAGE_ARCHIVE)

# Runs the built image (buildah, as UID 10001): imports, the steps' --help, users, folders, no proxy CA.
image-smoke:
	bash hack/image/smoke.sh $(IMAGE)

# Removes caches only: ./volume holds your runs, exported and served models (rm -rf volume yourself).
clean:
	rm -rf local_outputs .pytest_cache .ruff_cache
