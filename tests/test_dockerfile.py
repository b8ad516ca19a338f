"""The Dockerfile, parsed (Docker cannot run here): the official TensorFlow base of the pinned version, the
project installed at build time, a non-root user, nothing installed at start, and `make image` builds the
tag the pipeline runs."""

import json
import re
import shlex
import tomllib
from pathlib import Path

import yaml
from packaging.requirements import Requirement

from components import DEFAULT_IMAGE

REPO = Path(__file__).resolve().parents[1]


def _instructions(path: Path) -> list[tuple[str, str]]:
    """``(INSTRUCTION, arguments)`` in order, comments dropped, ``\\`` continuations joined."""
    out, pending = [], ""
    for line in path.read_text().splitlines():
        stripped = line.strip()
        if not pending and (not stripped or stripped.startswith("#")):
            continue
        if stripped.endswith("\\"):
            pending += stripped[:-1] + " "
            continue
        full = pending + stripped
        pending = ""
        keyword, _, args = full.partition(" ")
        out.append((keyword.upper(), args.strip()))
    assert not pending, "Dockerfile ends inside a continued line"
    return out


def _pyproject() -> dict:
    return tomllib.loads((REPO / "pyproject.toml").read_text())


def _exec_form(args: str) -> list[str]:
    return json.loads(args) if args.startswith("[") else shlex.split(args)


def test_base_is_the_official_tensorflow_image_of_the_pinned_version():
    froms = [a for k, a in _instructions(REPO / "Dockerfile") if k == "FROM"]
    assert len(froms) == 1, froms
    image, _, tag = froms[0].partition(":")
    assert image == "tensorflow/tensorflow"  # Docker Hub's official image, no mirror or fork
    pin = next(
        Requirement(d) for d in _pyproject()["project"]["dependencies"] if d.startswith("tensorflow==")
    )
    assert re.fullmatch(r"\d+\.\d+\.\d+", tag), tag
    assert pin.specifier.contains(tag), f"FROM {froms[0]} does not satisfy the pin {pin}"


def test_the_build_checks_the_base_python_against_requires_python():
    runs = " ".join(a for k, a in _instructions(REPO / "Dockerfile") if k == "RUN")
    assert _pyproject()["project"]["requires-python"] == ">=3.11,<3.12"
    assert "sys.version_info[:2] == (3, 11)" in runs


def test_the_project_is_installed_at_build_time_from_its_sources():
    steps = _instructions(REPO / "Dockerfile")
    copied = {src for k, a in steps if k == "COPY" for src in _exec_form(a)[:-1]}
    includes = _pyproject()["tool"]["setuptools"]["packages"]["find"]["include"]
    for pattern in includes:  # every package of the distribution is copied in
        assert pattern.rstrip("*") in copied, pattern
    installs = [a for k, a in steps if k == "RUN" and "pip install" in a]
    assert any(re.search(r"pip install (--no-deps --force-reinstall )?\.(\s|$)", a) for a in installs), (
        installs
    )
    assert not any("-e " in a or "--editable" in a for a in installs)  # pods import from site-packages
    last_install = max(i for i, (k, a) in enumerate(steps) if k == "RUN" and "pip install" in a)
    last_copy = max(i for i, (k, _) in enumerate(steps) if k == "COPY")
    assert last_copy < last_install, "the project must be installed after its sources are copied"


def test_it_runs_as_a_non_root_user_by_number():
    users = [a for k, a in _instructions(REPO / "Dockerfile") if k == "USER"]
    assert users, "no USER: the image would run as root"
    uid = users[-1].split(":")[0]
    assert uid.isdigit() and int(uid) != 0, users[-1]  # numeric, so runAsNonRoot can verify it


def test_nothing_is_installed_when_a_container_starts():
    steps = _instructions(REPO / "Dockerfile")
    for keyword, args in steps:
        if keyword in ("ENTRYPOINT", "CMD"):
            command = " ".join(_exec_form(args))
            assert not re.search(r"\b(pip3?|install|uv|conda)\b", command), (keyword, args)
    spec = next(yaml.safe_load_all((REPO / "compiled" / "train.yaml").read_text()))
    for name, executor in spec["deploymentSpec"]["executors"].items():
        assert "pip install" not in json.dumps(executor["container"]), name


def test_make_image_builds_the_tag_the_pipeline_runs():
    makefile = (REPO / "Makefile").read_text()
    default = re.search(r"^IMAGE\s*\?=\s*(\S+)\s*$", makefile, re.MULTILINE)
    assert default, "Makefile: no `IMAGE ?= <tag>`"
    assert default.group(1) == DEFAULT_IMAGE
    recipe = re.search(r"^image:.*\n((?:\t.*\n?)+)", makefile, re.MULTILINE)
    assert recipe, "Makefile: no `image:` target"
    assert re.search(r"docker build\b.*-t \$\(IMAGE\)\s.*\.$", recipe.group(1).strip(), re.MULTILINE), (
        recipe.group(1)
    )
    spec = next(yaml.safe_load_all((REPO / "compiled" / "train.yaml").read_text()))
    assert spec["root"]["inputDefinitions"]["parameters"]["image"]["defaultValue"] == DEFAULT_IMAGE
    assert {e["container"]["image"] for e in spec["deploymentSpec"]["executors"].values()} == {DEFAULT_IMAGE}


def test_dockerignore_keeps_the_context_small_but_complete():
    ignored = {
        line.strip()
        for line in (REPO / ".dockerignore").read_text().splitlines()
        if line.strip()[:1] not in ("", "#")
    }
    assert {".git", ".venv", "volume", "tests"} <= ignored
    copied = {s for k, a in _instructions(REPO / "Dockerfile") if k == "COPY" for s in _exec_form(a)[:-1]}
    assert not copied & ignored, copied & ignored
