"""The scalars of TensorBoard event files, read without TensorFlow.

The report (:mod:`tfk8s.steps.report`, ``tfk8s report``) needs only the per-epoch scalars; importing TensorFlow to
read them took 5 s and printed its C++ start-up lines (oneDNN, CUDA, CPU features) on the terminal, which no
setting of ``TF_CPP_MIN_LOG_LEVEL`` silences in TF 2.21. The files are TFRecord framed (a little-endian uint64
length, its masked CRC, the data, the data's masked CRC) ``tensorflow.Event`` protocol buffers; this module
decodes the few fields it needs straight from the wire format (``tensorflow/core/util/event.proto``,
``summary.proto``, ``tensor.proto``, ``tensor_shape.proto``):

- ``Event``: ``step`` (2, int64), ``summary`` (5);
- ``Summary``: ``value`` (1, repeated); ``Summary.Value``: ``tag`` (1), ``simple_value`` (2, float), ``tensor`` (8);
- ``TensorProto``: ``dtype`` (1), ``tensor_shape`` (2), ``tensor_content`` (4), ``float_val`` (5),
  ``double_val`` (6), ``int_val`` (7), ``int64_val`` (10); a scalar has one element.

CRCs are not checked; a record cut short (a file still being written) ends the file.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Iterator
from pathlib import Path

_DT_FLOAT, _DT_DOUBLE, _DT_INT32, _DT_INT64 = 1, 2, 3, 9
_CONTENT = {_DT_FLOAT: "<f", _DT_DOUBLE: "<d", _DT_INT32: "<i", _DT_INT64: "<q"}


def records(path: str | os.PathLike) -> Iterator[bytes]:
    """The records of a TFRecord file, in order (stops at a truncated one)."""
    data = Path(path).read_bytes()
    i = 0
    while i + 12 <= len(data):
        (length,) = struct.unpack_from("<Q", data, i)
        start, end = i + 12, i + 12 + length
        if end + 4 > len(data):
            return
        yield data[start:end]
        i = end + 4


def _varint(buf: bytes, i: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        b = buf[i]
        i += 1
        value |= (b & 0x7F) << shift
        if not b & 0x80:
            return value, i
        shift += 7


def fields(buf: bytes) -> Iterator[tuple[int, int, bytes | int]]:
    """``(field number, wire type, value)`` of a protocol buffer message: an int for varints, the raw bytes for
    fixed-width and length-delimited fields."""
    i = 0
    while i < len(buf):
        key, i = _varint(buf, i)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, i = _varint(buf, i)
            yield number, wire, value
        elif wire == 1:
            yield number, wire, buf[i:i + 8]
            i += 8
        elif wire == 2:
            length, i = _varint(buf, i)
            yield number, wire, buf[i:i + length]
            i += length
        elif wire == 5:
            yield number, wire, buf[i:i + 4]
            i += 4
        else:  # groups: not in these messages
            raise ValueError(f"unsupported wire type {wire}")


def _packed(value: bytes | int, wire: int, fmt: str) -> list[float]:
    if wire == 0:
        return [float(value)]  # type: ignore[arg-type]
    if fmt in ("<f", "<d") and isinstance(value, bytes):
        return [x for (x,) in struct.iter_unpack(fmt, value)]
    out, i = [], 0
    while isinstance(value, bytes) and i < len(value):  # packed varints
        v, i = _varint(value, i)
        out.append(float(v - (1 << 64) if v >= 1 << 63 else v))
    return out


def tensor_scalar(buf: bytes) -> float | None:
    """The value of a one-element numeric ``TensorProto`` (None for anything else)."""
    dtype, size, content, values = 0, 1, b"", []
    for number, wire, value in fields(buf):
        if number == 1 and wire == 0:
            dtype = int(value)  # type: ignore[arg-type]
        elif number == 2 and isinstance(value, bytes):
            for n, _, dim in fields(value):
                if n == 2 and isinstance(dim, bytes):
                    size *= next((int(v) for k, _, v in fields(dim) if k == 1), 0)  # type: ignore[arg-type]
        elif number == 4 and isinstance(value, bytes):
            content = value
        elif number == 5:
            values += _packed(value, wire, "<f")
        elif number == 6:
            values += _packed(value, wire, "<d")
        elif number in (7, 10):
            values += _packed(value, wire, "")
    if size != 1:
        return None
    if content and dtype in _CONTENT:
        return float(struct.unpack(_CONTENT[dtype], content[:struct.calcsize(_CONTENT[dtype])])[0])
    return float(values[0]) if len(values) == 1 else None


def event_scalars(record: bytes) -> Iterator[tuple[int, str, float]]:
    """``(step, tag, value)`` of every scalar in one ``Event`` record."""
    step, summary = 0, b""
    for number, _, value in fields(record):
        if number == 2 and isinstance(value, int):
            step = value - (1 << 64) if value >= 1 << 63 else value
        elif number == 5 and isinstance(value, bytes):
            summary = value
    for number, _, value in fields(summary):
        if number != 1 or not isinstance(value, bytes):
            continue
        tag, scalar = "", None
        for n, _, v in fields(value):
            if n == 1 and isinstance(v, bytes):
                tag = v.decode("utf-8", "replace")
            elif n == 2 and isinstance(v, bytes):
                (scalar,) = struct.unpack("<f", v)
            elif n == 8 and isinstance(v, bytes) and scalar is None:
                scalar = tensor_scalar(v)
        if tag and scalar is not None:
            yield step, tag, float(scalar)


def read_scalars(log_dir: str | os.PathLike) -> dict[str, list[tuple[int, float]]]:
    """Every scalar in the TensorBoard event files under ``log_dir`` (not recursive): ``{tag: [(step, value)]}``
    sorted by step, the last value of a step kept. Empty when there are none. ``simple_value`` summaries and the
    one-element tensor summaries ``tf.summary.write``/``tf.summary.scalar`` write are read alike."""
    files = sorted(Path(log_dir).glob("events.out.tfevents.*")) if Path(log_dir).is_dir() else []
    found: dict[str, dict[int, float]] = {}
    for f in files:
        try:
            for record in records(f):
                for step, tag, value in event_scalars(record):
                    found.setdefault(tag, {})[step] = value
        except (OSError, ValueError, IndexError, struct.error):  # unreadable or cut short: what was read counts
            continue
    return {tag: sorted(steps.items()) for tag, steps in found.items()}
