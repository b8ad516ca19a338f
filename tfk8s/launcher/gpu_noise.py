"""TensorFlow's CUDA start-up lines on a machine without a GPU: noise in a local replica's log.

TensorFlow's CUDA build (the ``tensorflow`` wheel a development machine has) says on every start, before its
logging is set up, that it found no CUDA driver (``cudart_stub.cc``), and later that ``cuInit`` failed; no
environment variable silences them in TF 2.21 (``TF_CPP_MIN_LOG_LEVEL`` comes too late for the first). Every
``make run`` replica's log opened with them. :func:`without_cuda_noise` leaves them out where
:func:`has_nvidia_gpu` is false; on a machine with a GPU every line is kept: a CUDA line may then say why the GPU
is not used.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Iterator

NO_GPU_NOISE = re.compile(
    r"^[IWE]\d{4} [\d:.]+ +\d+ (cudart_stub\.cc:\d+\] Could not find cuda drivers on your machine, GPU will not be "
    r"used\.|cuda_platform\.cc:\d+\] failed call to cuInit: INTERNAL: CUDA error: Failed call to cuInit: UNKNOWN "
    r"ERROR \(303\))$")
"""What TensorFlow's CUDA build says on every start on a machine without an NVIDIA driver (every ``make run``
replica's log opened with it): left out of the replicas' output there (:func:`has_nvidia_gpu` false), never on a
machine with a GPU, where a CUDA line may be the one that says why the GPU is not used."""
ABSL_PREAMBLE = "WARNING: All log messages before absl::InitializeLog() is called are written to STDERR"
"""absl's line just before the first of those (left out with it, kept before anything else)."""


def has_nvidia_gpu() -> bool:
    """Whether this machine has an NVIDIA driver loaded (``/proc/driver/nvidia`` or a ``/dev/nvidia*`` device): then
    TensorFlow's CUDA lines are kept."""
    return os.path.exists("/proc/driver/nvidia") or any(
        os.path.exists(f"/dev/{d}") for d in ("nvidiactl", "nvidia0"))


def without_cuda_noise(lines: Iterable[str]) -> Iterator[str]:
    """``lines`` without :data:`NO_GPU_NOISE` lines and absl's preamble just before one (kept before any other)."""
    held = None
    for line in lines:
        if line == ABSL_PREAMBLE and held is None:
            held = line
            continue
        if NO_GPU_NOISE.match(line):
            held = None
            continue
        if held is not None:
            yield held
            held = None
        yield line
    if held is not None:
        yield held
