# The tfk8s image: every pipeline step (under KFP, or Argo via compiled/train.argo.yaml) and every training
# replica runs in it. Build: `make image` (docker build -t ghcr.io/tfk8s/tfk8s:0.1.0 . where a Docker engine
# runs; elsewhere hack/image/build.sh, buildah on a Debian base made locally). Nothing is pip-installed when a
# pod starts: the components are compiled with install_kfp_package=False and the project, kfp included, is
# installed here.
#
# Two variants (build argument VARIANT; `make image VARIANT=gpu`), one Dockerfile:
# - cpu (the default, ghcr.io/tfk8s/tfk8s:0.1.0): TensorFlow from PyPI's `tensorflow-cpu` of the version
#   pyproject.toml pins (tensorflow==2.21.*): no CUDA kernels, so no `failed call to cuInit` lines in a
#   replica's log, and about a third of the size of an image with the CUDA build;
# - gpu (ghcr.io/tfk8s/tfk8s:0.1.0-gpu): `tensorflow[and-cuda]`, the CUDA build with NVIDIA's CUDA, cuDNN and
#   NCCL wheels (a node needs only the driver). The launcher runs it for a replica type with gpus > 0 unless
#   told otherwise (the `gpu_image` Kubernetes setting).
# hack/image/requirements.py turns pyproject's dependencies into the variant's list.
#
# Base (build argument BASE): any image with Python 3.11 and pip (no ensurepip needed) and glibc's
# libstdc++ (the TensorFlow wheels link against it). By default Docker Hub's official python:3.11-slim-bookworm
# (Debian 12, like hack/image/build.sh's local base; assumed, not verified here: no registry is reachable from
# this repo's machines). hack/image/build.sh builds on localhost/tfk8s-base:bookworm, a Debian bookworm root
# file system made by mmdebstrap. Neither has TensorFlow: the dependency layer installs the variant's wheel.
# tfk8s requires Python 3.11 (requires-python >=3.11,<3.12), so the first RUN checks the interpreter and
# stops the build with a clear message otherwise, rather than forcing an install into an unsupported Python;
# then move the TF pin and requires-python together.
ARG BASE=python:3.11-slim-bookworm
FROM ${BASE}

# Everything is installed into a virtual environment at a fixed path, first on PATH (so `python`, `python3`
# and `pip` are the venv's, on any base). Why a venv and not PIP_BREAK_SYSTEM_PACKAGES: Debian's Python is
# "externally managed" (PEP 668) and a pip install over it could replace files of Debian's own packages; the
# venv keeps the two apart on every base, and one path for both bases. --system-site-packages so that a
# base's own packages (a base with TensorFlow in its system Python, given as BASE) are seen; --without-pip so that no ensurepip (Debian's python3-venv) is needed: the base's own pip installs into the
# venv when run by the venv's python.
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    VIRTUAL_ENV=/opt/venv \
    PATH=/opt/venv/bin:${PATH}

# Non-root, by number so Kubernetes can verify runAsNonRoot (USER at the end). KFP's executor writes
# artifacts under /gcs, /minio, /s3 and /oci (local mounts of the pipeline root), which a non-root user cannot
# create at start; /mnt/tfk8s is the volume's mount point. Before the dependencies: it never changes.
RUN python3 -c "import sys; sys.exit(0 if sys.version_info[:2] == (3, 11) else \
    'tfk8s needs Python 3.11 (pyproject requires-python); this base image has ' + sys.version)" \
    && python3 -m venv --system-site-packages --without-pip /opt/venv \
    && python -m pip --version \
    && useradd --uid 10001 --user-group --create-home --shell /usr/sbin/nologin tfk8s \
    && mkdir -p /gcs /minio /s3 /oci /mnt/tfk8s \
    && chown tfk8s:tfk8s /gcs /minio /s3 /oci /mnt/tfk8s

WORKDIR /opt/tfk8s

# Dependencies first, in their own layer: it is rebuilt only when pyproject.toml (or the variant) changes.
# hack/image/requirements.py writes the variant's list (the TensorFlow pin as tensorflow-cpu or
# tensorflow[and-cuda]; for cpu, tf-keras with --no-deps, as it names the full `tensorflow` as its
# dependency). A TLS-intercepting proxy's CA, where the build needs one, comes in only as the build secret
# `pip_cert` (a PEM bundle; hack/image/build.sh passes the host's): mounted for this RUN alone, it is in no
# layer, no ENV and no history (the next RUN needs it too: pip fetches setuptools to build the project).
# Without the secret pip uses the base's own CA bundle. (RUN --mount: BuildKit, Docker's default builder since
# 23.0, and buildah.) VARIANT is declared here, after the layers both variants share.
# Trimmed in the same layer (a later RUN could not shrink it), nothing the steps and replicas use: TensorFlow's
# C++ headers (tensorflow/include, 287 MB: only for compiling custom ops), libclang (61 MB: TensorFlow's build
# tooling) and pyarrow (170 MB: TFDS imports it lazily, for Parquet data sets only), and the shared libraries'
# symbol tables of TensorFlow's own shared libraries (`strip --strip-unneeded`, where the base has binutils:
# ~230 MB; the dynamic symbols stay). Only TensorFlow's: the libraries auditwheel bundled into other wheels
# (numpy.libs/...) were rewritten by patchelf, and stripping one breaks its loading ("ELF load command
# address/offset not page-aligned": seen with NumPy's OpenBLAS).
# `pip check` in the image therefore names tf-keras (cpu), libclang and pyarrow as missing: expected.
ARG VARIANT=cpu
COPY pyproject.toml README.md hack/image/requirements.py ./
RUN --mount=type=secret,id=pip_cert \
    if [ -s /run/secrets/pip_cert ]; then export PIP_CERT=/run/secrets/pip_cert; fi \
    && python requirements.py "$VARIANT" pyproject.toml /tmp/requirements \
    && python -m pip install -r /tmp/requirements/requirements.txt \
    && if [ -s /tmp/requirements/no-deps.txt ]; then \
           python -m pip install --no-deps -r /tmp/requirements/no-deps.txt; fi \
    && rm -rf /tmp/requirements \
    && site=$(python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])') \
    && rm -rf "$site/tensorflow/include" \
    && python -m pip uninstall -y -q libclang pyarrow \
    && if command -v strip >/dev/null; then \
           find "$site/tensorflow" -type f \( -name '*.so' -o -name '*.so.[0-9]*' \) \
               -exec strip --strip-unneeded {} +; fi \
    && du -sh "$site"

# Then the project itself (not editable: the pods import it from site-packages, not from /opt/tfk8s).
COPY tfk8s ./tfk8s
COPY trainer ./trainer
COPY components ./components
COPY pipelines ./pipelines
RUN --mount=type=secret,id=pip_cert \
    if [ -s /run/secrets/pip_cert ]; then export PIP_CERT=/run/secrets/pip_cert; fi \
    && python -m pip install --no-deps --force-reinstall . \
    && python -c "import components.launch_training, components.push_model, pipelines.train, tfk8s.cmd, trainer.task"

LABEL org.tfk8s.image.variant=${VARIANT}

USER 10001:10001
WORKDIR /home/tfk8s

# No ENTRYPOINT: KFP and Argo set the command (python -m components.<step>, python -m trainer.task).
CMD ["python", "-m", "pipelines.train", "--help"]
