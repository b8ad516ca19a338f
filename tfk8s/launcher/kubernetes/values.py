"""Checking the values a user gives the Kubernetes settings: quantities (``500m``, ``4Gi``), JSON objects and lists,
names (DNS-1123 labels and subdomains, label values, env names), integers and seconds. Every function raises
:class:`ValueError` naming the parameter and the fix."""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from decimal import Decimal, InvalidOperation
from typing import Any

DNS1123_SUBDOMAIN_RULE = ("a DNS-1123 subdomain: at most 253 lower-case letters, digits, '-' and '.', starting and "
                          "ending with a letter or digit, e.g. 'tfk8s-data'")

DNS1123_LABEL_RULE = ("a DNS-1123 label: at most 63 lower-case letters, digits and '-', starting and ending with a "
                      "letter or digit, no dots, e.g. 'tfk8s-data'")

DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")

DNS1123_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")

LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")

ENV_NAME = re.compile(r"^[-._a-zA-Z][-._a-zA-Z0-9]*$")

_QUANTITY = re.compile(r"^([+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+))(Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|M|G|T|P|E|[eE][+-]?[0-9]+)?$")

_SUFFIX = {
    "": Decimal(1), "n": Decimal("1e-9"), "u": Decimal("1e-6"), "m": Decimal("1e-3"), "k": Decimal("1e3"),
    "M": Decimal("1e6"), "G": Decimal("1e9"), "T": Decimal("1e12"), "P": Decimal("1e15"), "E": Decimal("1e18"),
    "Ki": Decimal(2**10), "Mi": Decimal(2**20), "Gi": Decimal(2**30), "Ti": Decimal(2**40),
    "Pi": Decimal(2**50), "Ei": Decimal(2**60),
}

def parse_quantity(value: str) -> Decimal:
    """A Kubernetes resource quantity (``"500m"``, ``"2Gi"``, ``"1.5"``, ``"1e3"``) as a number.

    Raises:
        ValueError: when ``value`` is not a quantity.
    """
    m = _QUANTITY.match(str(value).strip()) if isinstance(value, str | int) and not isinstance(value, bool) else None
    if not m:
        raise ValueError(f"{value!r} is not a Kubernetes quantity (e.g. '500m' or '2' CPUs, '512Mi' or '4Gi')")
    number, suffix = m.group(1), m.group(2) or ""
    try:
        scale = _SUFFIX[suffix] if suffix in _SUFFIX else Decimal(10) ** int(suffix[1:])
        return Decimal(number) * scale
    except (InvalidOperation, ValueError) as e:  # pragma: no cover - the regex admits only valid numbers
        raise ValueError(f"{value!r} is not a Kubernetes quantity") from e

GPU_SHM_SIZE = "1Gi"  # /dev/shm of a GPU replica by default: NCCL outgrows the container runtime's 64 MiB


def shm_of(shm_size: str, gpus: int, memory_limit: str) -> str:
    """The size of a replica's memory-backed ``/dev/shm`` (an ``emptyDir``'s ``sizeLimit``), ``""`` for none.

    ``shm_size`` given: that size (``"0"``: none); empty: :data:`GPU_SHM_SIZE`, at most half ``memory_limit``,
    for a replica with ``gpus`` > 0 (NCCL's buffers outgrow the container runtime's 64 MiB), none without GPUs.
    Its pages are charged to the container's memory cgroup, so a size given must be below ``memory_limit``.

    Raises:
        ValueError: ``shm_size`` not a quantity, negative, or not below ``memory_limit``.
    """
    require(isinstance(shm_size, str), f"shm_size must be a quantity string like '2Gi', got {shm_size!r}")
    if shm_size:
        try:
            size = parse_quantity(shm_size)
        except ValueError as e:
            raise ValueError(f"shm_size: {e}") from None
        require(0 <= size < parse_quantity(memory_limit),
                f"shm_size {shm_size!r} (the /dev/shm) is not below the memory limit {memory_limit!r}, which its "
                f"pages count in: raise memory (or memory_limit), or set a smaller shm_size ('0': none)")
        return shm_size if size else ""
    if not gpus:
        return ""
    half = parse_quantity(memory_limit) / 2
    return GPU_SHM_SIZE if half >= parse_quantity(GPU_SHM_SIZE) else f"{max(1, int(half // 2**20))}Mi"


def require(cond: bool, msg: str) -> None:
    """Raise ``ValueError(msg)`` unless ``cond``."""
    if not cond:
        raise ValueError(msg)

def str_map(value: Any, what: str) -> dict[str, str]:
    """``value`` as a dict of strings to strings (``what`` names it in the error)."""
    require(isinstance(value, Mapping) and all(isinstance(k, str) and isinstance(v, str) for k, v in value.items()),
             f"{what} must be a JSON object of strings to strings, e.g. {{\"key\": \"value\"}}; got {value!r}")
    return dict(value)

_QUALIFIED_NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
METADATA_KEY_RULE = ("a key is an optional DNS-subdomain prefix and '/' and a name of at most 63 letters, digits, "
                     "'-', '_' and '.', starting and ending with a letter or digit, e.g. 'team.example.com/cost-center'")


def metadata_key_error(key: Any) -> str:
    """Why ``key`` is not a valid Kubernetes label or annotation key ("" when it is)."""
    if not isinstance(key, str) or not key:
        return "an empty or non-string key"
    prefix, _, name = key.rpartition("/")
    if "/" in key and (not prefix or len(prefix) > 253 or not DNS1123_SUBDOMAIN.match(prefix)):
        return f"its prefix {prefix!r} is not a DNS-1123 subdomain (lower-case letters, digits, '-', '.')"
    if len(name) > 63 or not _QUALIFIED_NAME.match(name):
        return f"its name {name!r} is not at most 63 letters, digits, '-', '_' or '.' starting and ending alphanumeric"
    return ""


def metadata_map(value: Any, what: str, *, labels: bool) -> dict[str, str | None]:
    """``value`` (a JSON object, text or parsed) as Kubernetes labels (``labels``) or annotations, each key and
    label value checked; a ``None`` (JSON null) value is kept: it drops that key where the maps are merged.

    Raises:
        ValueError: not an object, a bad key, a non-string value, a label value Kubernetes refuses; the message
            names ``what``, the key and the fix.
    """
    parsed = parse_json(value, what, dict, '{"team.example.com/cost-center": "ml"}')
    for k, v in parsed.items():
        why = metadata_key_error(k)
        require(not why, f"{what}: key {k!r} is not a valid Kubernetes {'label' if labels else 'annotation'} key: "
                         f"{why}; {METADATA_KEY_RULE}")
        require(v is None or isinstance(v, str), f"{what}: the value of {k!r} must be a string (quote numbers and "
                                                  f'booleans: "false"), or null to drop the key; got {v!r}')
        if labels and v is not None:
            require(len(v) <= 63 and bool(LABEL_VALUE.match(v)),
                    f"{what}: label {k}={v!r}: a label value is at most 63 letters, digits, '-', '_' or '.', "
                    f"starting and ending alphanumeric (or empty); put free text in an annotation instead")
    return dict(parsed)


def parse_json(value: str, param: str, kind: type, example: str) -> Any:
    """``value`` (JSON text, or already parsed) as a ``kind`` (dict or list); empty: an empty one."""
    if value in ("", None):
        return kind()
    if not isinstance(value, str):  # already parsed (a Python caller)
        parsed = value
    else:
        try:
            parsed = json.loads(value)
        except ValueError as e:
            raise ValueError(f"{param} is not valid JSON ({e}); pass a JSON {kind.__name__}, e.g. {example}") from None
    require(isinstance(parsed, kind), f"{param} must be a JSON {'object' if kind is dict else 'list'}, "
                                       f"e.g. {example}; got {value!r}")
    return parsed

def integer(value: Any, name: str) -> int:
    """``value`` (a number or its text) as an integer; ``name`` names it in the error."""
    try:
        v = float(value) if isinstance(value, str) else value
        ok = not isinstance(value, bool) and isinstance(v, int | float) and math.isfinite(v) and v == int(v)
    except (TypeError, ValueError):
        ok = False
    if not ok:
        raise ValueError(f"{name} must be an integer, got {value!r}")
    return int(v)

def number(value: Any, name: str) -> float:
    """``value`` as a finite number of seconds; ``name`` names it in the error."""
    try:
        v = float(value)
    except (TypeError, ValueError):
        v = math.nan
    if isinstance(value, bool) or not math.isfinite(v):
        raise ValueError(f"{name} must be a number of seconds, got {value!r}")
    return v


def with_gpu_image(replica: Any, changes: Mapping[str, Any], image: str, gpu_image: str = "") -> Any:
    """``replica`` (a replica type's settings: a dataclass with ``image`` and ``gpus``) with the image a type
    with ``gpus > 0`` runs when its ``replica_overrides`` (``changes``) name no image: ``gpu_image`` if given;
    else the project image's GPU variant (:data:`tfk8s.DEFAULT_GPU_IMAGE`, TensorFlow's CUDA build: ``make image
    VARIANT=gpu``) when ``image`` is the project's default (its CPU variant, ``tensorflow-cpu``, cannot use a
    GPU); else ``image`` itself (a user's own image is taken to hold what its replicas need). Any other type:
    ``replica`` as it is."""
    import dataclasses

    from tfk8s import DEFAULT_GPU_IMAGE, DEFAULT_IMAGE

    if "image" in changes or not replica.gpus > 0:
        return replica
    chosen = gpu_image or (DEFAULT_GPU_IMAGE if image == DEFAULT_IMAGE else image)
    return dataclasses.replace(replica, image=chosen)
