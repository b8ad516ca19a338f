"""The image's dependency list for one variant, from pyproject.toml's ``[project] dependencies``.

    python requirements.py cpu|gpu PYPROJECT OUT_DIR

writes ``OUT_DIR/requirements.txt`` (installed with their dependencies) and ``OUT_DIR/no-deps.txt``
(installed with ``--no-deps``), for the Dockerfile's dependency layer. The TensorFlow pin
(``tensorflow==2.21.*``) becomes, with the same version specifier:

- ``cpu`` (the default image): ``tensorflow-cpu`` (PyPI's CPU-only build: no CUDA kernels, so no
  ``cuInit`` errors in a CPU replica's log, and ~1.4 GB less in the image). ``tf-keras`` declares
  ``Requires-Dist: tensorflow`` (the full distribution, which would bring the CUDA build back), so it goes to
  ``no-deps.txt``: its one dependency, TensorFlow, is the ``tensorflow-cpu`` above (same modules, same
  version). ``pip check`` in the image therefore reports ``tf-keras requires tensorflow``; that is expected.
- ``gpu``: ``tensorflow[and-cuda]`` (the CUDA build with NVIDIA's CUDA/cuDNN/NCCL wheels: a node needs only
  the driver), everything else as pinned.

Standard library only (it runs in the image's base Python before anything is installed). Errors: an unknown
variant, or a pyproject without a ``tensorflow==`` or ``tf-keras`` requirement, exit with a message naming
it.
"""

from __future__ import annotations

import re
import sys
import tomllib
from pathlib import Path

VARIANTS = ("cpu", "gpu")
_NAME = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)(\[[^\]]*\])?\s*(.*)$")


def _name(requirement: str) -> tuple[str, str]:
    """``(normalized project name, the rest: version specifier and marker)`` of a requirement string."""
    m = _NAME.match(requirement.split("#", 1)[0])
    if not m:
        raise SystemExit(f"requirements.py: cannot parse the requirement {requirement!r} in pyproject.toml")
    return re.sub(r"[-_.]+", "-", m.group(1)).lower(), m.group(3).strip()


def split(dependencies: list[str], variant: str) -> tuple[list[str], list[str]]:
    """``(requirements, no_deps)`` for ``variant`` ("cpu" or "gpu") from pyproject's dependency strings.

    Raises:
        SystemExit: an unknown variant, or no ``tensorflow`` / ``tf-keras`` requirement to rewrite.
    """
    if variant not in VARIANTS:
        raise SystemExit(f"requirements.py: variant must be one of {VARIANTS}, got {variant!r} "
                         f"(make image VARIANT=cpu|gpu)")
    names = {_name(d)[0] for d in dependencies}
    missing = {"tensorflow", "tf-keras"} - names
    if missing:
        raise SystemExit(f"requirements.py: pyproject.toml's dependencies lack {sorted(missing)}")
    requirements, no_deps = [], []
    for dep in dependencies:
        name, rest = _name(dep)
        if name == "tensorflow":
            requirements.append(("tensorflow-cpu" if variant == "cpu" else "tensorflow[and-cuda]") + rest)
        elif name == "tf-keras" and variant == "cpu":
            no_deps.append(dep.split("#", 1)[0].strip())
        else:
            requirements.append(dep.split("#", 1)[0].strip())
    return requirements, no_deps


def main(argv: list[str]) -> None:
    """``requirements.py VARIANT PYPROJECT OUT_DIR``: writes requirements.txt and no-deps.txt there."""
    if len(argv) != 3:
        raise SystemExit(__doc__)
    variant, pyproject, out = argv
    dependencies = tomllib.loads(Path(pyproject).read_text())["project"]["dependencies"]
    requirements, no_deps = split(dependencies, variant)
    Path(out).mkdir(parents=True, exist_ok=True)
    Path(out, "requirements.txt").write_text("".join(f"{r}\n" for r in requirements))
    Path(out, "no-deps.txt").write_text("".join(f"{r}\n" for r in no_deps))
    print(f"requirements.py: {variant}: " + " ".join(requirements + [f"{r} (--no-deps)" for r in no_deps]))


if __name__ == "__main__":
    main(sys.argv[1:])
