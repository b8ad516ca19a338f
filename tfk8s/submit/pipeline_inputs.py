"""``--param key=value`` items, checked against the inputs a compiled pipeline package declares and parsed to
their declared types, before any request or run."""

from __future__ import annotations

import difflib
import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from tfk8s.submit.errors import ParameterError


@dataclass(frozen=True)
class PipelineInput:
    """One input parameter the compiled pipeline declares."""

    name: str
    type: str  # STRING, NUMBER_INTEGER, NUMBER_DOUBLE, BOOLEAN, LIST, STRUCT
    default: Any = None
    optional: bool = True


def read_package(package_path: str | os.PathLike) -> dict:
    """The PipelineSpec (first YAML document) of a compiled package.

    Raises:
        FileNotFoundError: no such package (compile it: ``python pipelines/train.py --compile``).
    """
    path = Path(package_path)
    if not path.is_file():
        raise FileNotFoundError(f"no compiled pipeline at {path}: run `python pipelines/train.py --compile`")
    return next(yaml.safe_load_all(path.read_text()))


def pipeline_inputs(package_path: str | os.PathLike) -> dict[str, PipelineInput]:
    """The input parameters the compiled pipeline declares (``root.inputDefinitions.parameters``)."""
    declared = read_package(package_path)["root"].get("inputDefinitions", {}).get("parameters", {})
    return {
        name: PipelineInput(name, d["parameterType"], d.get("defaultValue"), d.get("isOptional", False))
        for name, d in declared.items()
    }


_EXPECTED = {
    "NUMBER_INTEGER": "an integer, e.g. 3",
    "NUMBER_DOUBLE": "a number, e.g. 0.001",
    "BOOLEAN": "true or false",
    "LIST": "a JSON list, e.g. [1, 2]",
    "STRUCT": 'a JSON object, e.g. {"a": 1}',
    "STRING": "a string",
}


def _parse_text(kind: str, text: str) -> Any:
    """A ``--param`` string as the declared type; ValueError if it is not one."""
    text = text.strip() if kind != "STRING" else text
    if kind == "NUMBER_INTEGER":
        return int(text)
    if kind == "NUMBER_DOUBLE":
        return float(text)
    if kind == "BOOLEAN":
        if text.lower() not in ("true", "false", "1", "0", "yes", "no"):
            raise ValueError(text)
        return text.lower() in ("true", "1", "yes")
    if kind in ("LIST", "STRUCT"):
        parsed = json.loads(text)
        if not isinstance(parsed, list if kind == "LIST" else dict):
            raise ValueError(text)
        return parsed
    return text


def _parse(inp: PipelineInput, value: Any) -> Any:
    kind = inp.type
    if isinstance(value, str):
        try:
            return _parse_text(kind, value)
        except ValueError:
            pass
    elif kind == "NUMBER_INTEGER" and isinstance(value, int) and not isinstance(value, bool):
        return value
    elif kind == "NUMBER_DOUBLE" and isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    elif (kind, type(value)) in (("BOOLEAN", bool), ("LIST", list), ("STRUCT", dict)):
        return value
    raise ParameterError(
        f"parameter {inp.name}={value!r}: expected {_EXPECTED.get(kind, kind)} ({kind} in the compiled pipeline)"
    )


def parse_param_items(items: list[str] | tuple[str, ...]) -> dict[str, Any]:
    """``["epochs=2", "model_name=x"]`` -> ``{"epochs": "2", "model_name": "x"}`` (values still strings).

    A dotted key sets one key of an object parameter: ``kubernetes.cpu=2`` and ``kubernetes.node_selector=
    {"pool": "gpu"}`` -> ``{"kubernetes": {"cpu": 2, "node_selector": {"pool": "gpu"}}}`` (each value JSON
    if it parses as JSON, else the string).

    Raises:
        ParameterError: an item without ``=``, a key given twice, or an object parameter given both whole and
            by dotted keys.
    """
    out: dict[str, Any] = {}
    dotted: set[str] = set()
    for item in items:
        key, sep, value = item.partition("=")
        key = key.strip()
        if not sep or not key:
            raise ParameterError(f"--param {item!r}: expected key=value, e.g. --param epochs=2")
        group, dot, sub = key.partition(".")
        if dot and sub:
            if group in out and group not in dotted:
                raise ParameterError(f"--param {group} given both whole and as {key}=...: use one form")
            entry = out.setdefault(group, {})
            if sub in entry:
                raise ParameterError(f"--param {key} given twice")
            try:
                entry[sub] = json.loads(value)
            except ValueError:
                entry[sub] = value
            dotted.add(group)
            continue
        if key in out:
            what = "both whole and by dotted keys" if key in dotted else f"twice ({out[key]!r} and {value!r})"
            raise ParameterError(f"--param {key} given {what}")
        out[key] = value
    return out


def resolve_params(package_path: str | os.PathLike, params: Mapping[str, Any] | None) -> dict[str, Any]:
    """Check ``params`` against the inputs the compiled package declares and parse them to the declared types.

    Strings are parsed (``"2"`` -> 2 for an integer input, ``"true"`` -> True for a boolean); other values must
    already have the declared type. Only the given parameters are returned: KFP fills in the defaults.

    Raises:
        ParameterError: an unknown name (the message lists the known ones), a value of the wrong type, or a
            required input left out.
    """
    declared = pipeline_inputs(package_path)
    params = dict(params or {})
    unknown = sorted(set(params) - set(declared))
    if unknown:
        close = {u: difflib.get_close_matches(u, declared, n=1) for u in unknown}
        hints = "".join(f" (did you mean {c[0]}?)" for c in close.values() if c) if len(unknown) == 1 else ""
        raise ParameterError(
            f"unknown pipeline parameter{'s' if len(unknown) > 1 else ''} {', '.join(unknown)}{hints}; "
            f"the compiled pipeline declares: {', '.join(sorted(declared))}"
        )
    missing = sorted(
        n for n, d in declared.items() if not d.optional and d.default is None and n not in params
    )
    if missing:
        raise ParameterError(
            f"required pipeline parameters missing: {', '.join(missing)} (pass --param key=value)"
        )
    return {name: _parse(declared[name], value) for name, value in params.items()}
