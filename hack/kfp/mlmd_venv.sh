#!/usr/bin/env bash
# Makes the virtual environment that runs hack/kfp/mlmd_server.py (ML Metadata's gRPC service over the PyPI
# ml-metadata wheel's store), once, at ${XDG_CACHE_HOME:-~/.cache}/tfk8s/kfp/mlmd-venv-<version>/, and prints its
# python (last line). A second run finds it and returns at once. Its own environment, not the project's:
# ml-metadata 1.17.1 pins protobuf<5 and absl-py<2, which TensorFlow 2.21 and kfp 2.17 do not allow.
# Needs python3.11 (the wheel is cp311) and PyPI. Exit codes: 0 ready, 3 python3.11 missing or pip failed.
set -euo pipefail
MLMD_VERSION=1.17.1
PYTHON="${PYTHON:-python3.11}"
venv="${XDG_CACHE_HOME:-$HOME/.cache}/tfk8s/kfp/mlmd-venv-${MLMD_VERSION}"
if [[ -f "$venv/.installed" ]]; then echo "$venv/bin/python"; exit 0; fi
command -v "$PYTHON" >/dev/null || { echo "mlmd_venv.sh: $PYTHON not found: the ml-metadata wheel needs CPython 3.11" >&2; exit 3; }
rm -rf "$venv"
"$PYTHON" -m venv "$venv"
"$venv/bin/python" -m pip install --quiet "ml-metadata==${MLMD_VERSION}" \
  || { echo "mlmd_venv.sh: pip could not install ml-metadata==${MLMD_VERSION} into $venv" >&2; exit 3; }
touch "$venv/.installed"
echo "$venv/bin/python"
