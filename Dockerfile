# The tfk8s image: every pipeline step (under KFP, or Argo via compiled/train.argo.yaml) and every training
# replica runs in it. Build: `make image` (docker build -t ghcr.io/tfk8s/tfk8s:0.1.0 .). Nothing is
# pip-installed when a pod starts: the components are compiled with install_kfp_package=False and the
# project, kfp included, is installed here.
#
# Base: the official TensorFlow image of the version pyproject.toml pins (tensorflow==2.21.*; a test keeps the
# two in step), so TensorFlow itself is not downloaded again. Assumed, not verified here (Docker cannot run in
# this repo's CI): like the 2.14-2.18 images, tensorflow/tensorflow:2.21.0 is Ubuntu 22.04 with Python 3.11
# as `python`/`python3`. tfk8s requires Python 3.11 (requires-python >=3.11,<3.12), so the first RUN checks
# the interpreter and stops the build with a clear message otherwise, rather than forcing an install into an
# unsupported Python; then move the TF pin and requires-python together. GPU: the same with
# tensorflow/tensorflow:2.21.0-gpu.
FROM tensorflow/tensorflow:2.21.0

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

RUN python3 -c "import sys; sys.exit(0 if sys.version_info[:2] == (3, 11) else \
    'tfk8s needs Python 3.11 (pyproject requires-python); this base image has ' + sys.version)"

WORKDIR /opt/tfk8s

# Dependencies first, in their own layer: it is rebuilt only when pyproject.toml changes. With no package
# folders copied yet, this installs the dependencies (tensorflow==2.21.* is already satisfied by the base).
COPY pyproject.toml README.md ./
RUN python3 -m pip install .

# Then the project itself (not editable: the pods import it from site-packages, not from /opt/tfk8s).
COPY tfk8s ./tfk8s
COPY trainer ./trainer
COPY components ./components
COPY pipelines ./pipelines
RUN python3 -m pip install --no-deps --force-reinstall . \
    && python -c "import components.launch_training, components.push_model, pipelines.train, tfk8s.steps, trainer.task"

# Non-root, by number so Kubernetes can verify runAsNonRoot. KFP's executor writes artifacts under /gcs,
# /minio, /s3 and /oci (local mounts of the pipeline root), which a non-root user cannot create at start.
RUN useradd --uid 10001 --user-group --create-home --shell /usr/sbin/nologin tfk8s \
    && mkdir -p /gcs /minio /s3 /oci /mnt/tfk8s \
    && chown tfk8s:tfk8s /gcs /minio /s3 /oci /mnt/tfk8s
USER 10001:10001
WORKDIR /home/tfk8s

# No ENTRYPOINT: KFP and Argo set the command (python -m components.<step>, python -m trainer.task).
CMD ["python", "-m", "pipelines.train", "--help"]
