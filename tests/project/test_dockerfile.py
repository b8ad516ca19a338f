"""The Dockerfile, parsed (no Docker engine runs here): a Python 3.11 base without TensorFlow (build argument
BASE; hack/image/build.sh gives a local Debian one), two variants (build argument VARIANT: tensorflow-cpu by
default, TensorFlow's CUDA build for gpu), the project installed at build time into a venv, a non-root user, nothing installed at start, no CA or proxy of the build host's in the
image, and `make image` builds the tag the pipeline runs. The test marked e2e inspects a built image, if
hack/image/build.sh left one in its cache."""

import hashlib
import importlib.util
import json
import os
import re
import shlex
import shutil
import subprocess
import tarfile
import tomllib
from pathlib import Path

import pytest
import yaml
from packaging.requirements import Requirement

from components import DEFAULT_IMAGE
from tfk8s import DEFAULT_GPU_IMAGE

REPO = Path(__file__).resolve().parents[2]


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


def _global_args() -> dict[str, str]:
    """The ``ARG name=default`` lines before the first FROM (the ones FROM can use)."""
    out = {}
    for keyword, args in _instructions(REPO / "Dockerfile"):
        if keyword == "FROM":
            break
        assert keyword == "ARG", f"{keyword} before FROM"
        name, _, default = args.partition("=")
        out[name] = default
    return out


def test_the_default_base_is_a_python_3_11_image_without_tensorflow():
    """`docker build .` starts from Docker Hub's python:3.11-slim-bookworm (Debian 12, like build.sh's base):
    the variant's TensorFlow wheel is the only TensorFlow in the image (the official TensorFlow image would
    bring the CUDA build into the CPU variant)."""
    assert _global_args().get("BASE") == "python:3.11-slim-bookworm"


def test_the_base_is_the_build_argument():
    froms = [a for k, a in _instructions(REPO / "Dockerfile") if k == "FROM"]
    assert froms in (["${BASE}"], ["$BASE"]), froms  # one stage, on whatever base the build names
    assert list(_global_args()) == ["BASE"]


def _requirements():
    spec = importlib.util.spec_from_file_location("requirements", REPO / "hack" / "image" / "requirements.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_cpu_variant_installs_tensorflow_cpu_of_the_pinned_version():
    deps = _pyproject()["project"]["dependencies"]
    pin = next(Requirement(d) for d in deps if d.startswith("tensorflow=="))
    requirements, no_deps = _requirements().split(deps, "cpu")
    tf = [Requirement(r) for r in requirements if r.startswith("tensorflow") and "datasets" not in r]
    assert [(r.name, r.specifier) for r in tf] == [("tensorflow-cpu", pin.specifier)]
    # tf-keras names `tensorflow` (the CUDA build) as its dependency: installed without it
    assert [Requirement(r).name for r in no_deps] == ["tf-keras"]
    assert not any(Requirement(r).name in ("tensorflow", "tf-keras") for r in requirements)
    # everything else as pyproject pins it
    rest = [d.split("#")[0].strip() for d in deps if not d.startswith(("tensorflow==", "tf-keras"))]
    assert [r for r in requirements if not r.startswith("tensorflow-cpu")] == rest


def test_the_gpu_variant_installs_the_cuda_build_of_the_pinned_version():
    deps = _pyproject()["project"]["dependencies"]
    pin = next(Requirement(d) for d in deps if d.startswith("tensorflow=="))
    requirements, no_deps = _requirements().split(deps, "gpu")
    tf = next(Requirement(r) for r in requirements if r.startswith("tensorflow["))
    assert (tf.name, tf.extras, tf.specifier) == ("tensorflow", {"and-cuda"}, pin.specifier)
    assert no_deps == [] and any(r.startswith("tf-keras==") for r in requirements)


def test_requirements_refuses_an_unknown_variant_naming_the_fix(tmp_path):
    with pytest.raises(SystemExit, match=r"variant must be one of \('cpu', 'gpu'\), got 'tpu'.*VARIANT="):
        _requirements().split(_pyproject()["project"]["dependencies"], "tpu")
    with pytest.raises(SystemExit, match=r"lack \['tf-keras'\]"):
        _requirements().split(["tensorflow==2.21.*"], "cpu")
    out = subprocess.run(["python3", str(REPO / "hack" / "image" / "requirements.py"), "cpu",
                          str(REPO / "pyproject.toml"), str(tmp_path)], check=True, capture_output=True, text=True)
    assert "tensorflow-cpu==" in (tmp_path / "requirements.txt").read_text(), out.stdout
    assert (tmp_path / "no-deps.txt").read_text().startswith("tf-keras==")


def test_the_variant_is_a_build_argument_declared_after_the_shared_layers():
    steps = _instructions(REPO / "Dockerfile")
    stage = steps[[k for k, _ in steps].index("FROM") + 1 :]
    args = [a for k, a in stage if k == "ARG"]
    assert args == ["VARIANT=cpu"], args
    at = stage.index(("ARG", "VARIANT=cpu"))
    assert not [a for k, a in stage[:at] if k in ("COPY", "ADD")]  # the user, venv and folders: shared
    deps = next(a for k, a in stage[at:] if k == "RUN" and "pip install" in a)
    assert 'python requirements.py "$VARIANT" pyproject.toml' in deps
    assert "pip install --no-deps -r /tmp/requirements/no-deps.txt" in deps
    assert ("LABEL", "org.tfk8s.image.variant=${VARIANT}") in stage
    # trimmed in the dependency layer itself (a later layer cannot shrink it): headers, build tooling, Parquet
    for trim in ('rm -rf "$site/tensorflow/include"', "pip uninstall -y -q libclang pyarrow",
                 "strip --strip-unneeded"):
        assert trim in deps, trim
    copied = next(a for k, a in stage[at:] if k == "COPY")
    assert "hack/image/requirements.py" in _exec_form(copied)
    assert "!hack/image/requirements.py" in (REPO / ".dockerignore").read_text().splitlines()


def test_build_sh_builds_on_the_local_base_with_no_daemon_and_no_pull():
    script = (REPO / "hack" / "image" / "build.sh").read_text()
    assert re.search(r"^DEBIAN_SUITE=bookworm\b", script, re.MULTILINE)  # Debian 12: Python 3.11
    assert "BASE_IMAGE=localhost/tfk8s-base:$DEBIAN_SUITE" in script
    assert re.search(r"^BASE_PACKAGES=.*\bpython3\b.*", script, re.MULTILINE)
    assert "mmdebstrap " in script and "--isolation chroot" in script and "--layers" in script
    lib = (REPO / "hack" / "image" / "lib.sh").read_text()
    assert '. "$(dirname "$0")/lib.sh"' in script
    # the store: overlay (layers as diffs) with no bind mount of its home left behind, else vfs; what an
    # interrupted step left mounted under it is unmounted at exit
    assert "--storage-opt overlay.skip_mount_home=true" in lib and "echo vfs" in lib
    assert "trap cleanup EXIT" in lib and "umount" in lib
    assert "PULL=never" in script  # the local base: nothing is pulled from a registry
    assert '--build-arg "BASE=$BASE"' in script and '--build-arg "VARIANT=$VARIANT"' in script
    assert "--variant) VARIANT=$2" in script and "case $VARIANT in cpu|gpu)" in script
    assert "IMAGE=${IMAGE:-$DEFAULT_GPU_IMAGE}" in script
    assert "${XDG_CACHE_HOME:-$HOME/.cache}/tfk8s/image" in script


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
    assert any(re.search(r"pip install --no-deps --force-reinstall \.(\s|$)", a) for a in installs), (
        installs
    )
    assert not any("-e " in a or "--editable" in a for a in installs)  # pods import from site-packages
    last_install = max(i for i, (k, a) in enumerate(steps) if k == "RUN" and "pip install" in a)
    last_copy = max(i for i, (k, _) in enumerate(steps) if k == "COPY")
    assert last_copy < last_install, "the project must be installed after its sources are copied"


def test_it_runs_as_a_non_root_user_by_number():
    steps = _instructions(REPO / "Dockerfile")
    users = [a for k, a in steps if k == "USER"]
    assert users, "no USER: the image would run as root"
    uid = users[-1].split(":")[0]
    assert uid.isdigit() and int(uid) != 0, users[-1]  # numeric, so runAsNonRoot can verify it
    runs = " ".join(a for k, a in steps if k == "RUN")
    assert f"useradd --uid {uid} " in runs
    for folder in (
        "/mnt/tfk8s",
        "/gcs",
        "/minio",
        "/s3",
        "/oci",
    ):  # the volume and KFP's local pipeline roots
        assert re.search(rf"chown tfk8s:tfk8s[^&]*\s{folder}(\s|$)", runs), folder


def test_the_project_goes_into_a_venv_first_on_path_not_over_the_system_python():
    """PEP 668: Debian's Python is externally managed; a venv at a fixed path, not --break-system-packages."""
    steps = _instructions(REPO / "Dockerfile")
    env = " ".join(a for k, a in steps if k == "ENV")
    assert re.search(r"\bVIRTUAL_ENV=/opt/venv\b", env)
    assert re.search(r"\bPATH=/opt/venv/bin:\$\{?PATH\}?(\s|$)", env)  # python, python3, pip: the venv's
    runs = " ".join(a for k, a in steps if k == "RUN")
    assert "python3 -m venv --system-site-packages --without-pip /opt/venv" in runs  # a base's own packages count
    assert "break-system-packages" not in runs.lower() and "BREAK_SYSTEM_PACKAGES" not in env


SECRET = "--mount=type=secret,id=pip_cert"
CA_OR_PROXY = re.compile(
    r"\b(https?_proxy|no_proxy|all_proxy|pip_cert|pip_index_url|pip_extra_index_url|pip_trusted_host"
    r"|requests_ca_bundle|ssl_cert_file|ssl_cert_dir|curl_ca_bundle)\b",
    re.IGNORECASE,
)


def test_no_ca_or_proxy_of_the_build_host_is_baked_in():
    """The proxy's CA reaches pip only as the build secret pip_cert, mounted for the RUNs that install: no
    ENV, ARG, LABEL or file (COPY/ADD) carries a CA or a proxy, so neither is in the image's config nor its
    layers."""
    steps = _instructions(REPO / "Dockerfile")
    for keyword, args in steps:
        if keyword in ("ENV", "ARG", "LABEL"):
            assert not CA_OR_PROXY.search(args), (keyword, args)
        if keyword in ("COPY", "ADD"):
            assert not re.search(r"\.(crt|pem|cer)\b|ca-certificates|secrets", args), (keyword, args)
    stage = steps[[k for k, _ in steps].index("FROM") + 1 :]
    assert list(_global_args()) == ["BASE"] and [
        a for k, a in stage if k == "ARG"
    ] == ["VARIANT=cpu"]  # ARGs land in history: only the variant's name
    installs = [a for k, a in steps if k == "RUN" and "pip install" in a]
    assert installs
    for run in installs:  # a build behind the proxy needs the CA in every RUN that fetches (the project's
        # build requirements too); the secret is used only if given, so a build without one works as before
        assert run.startswith(SECRET + " "), run
        assert "if [ -s /run/secrets/pip_cert ]; then export PIP_CERT=/run/secrets/pip_cert; fi" in run, run
    for keyword, args in steps:
        if keyword == "RUN" and "pip_cert" in args:
            assert "pip install" in args and not re.search(r"(cp|cat|tee|>)\s*\S*/run/secrets", args), args
    script = (REPO / "hack" / "image" / "build.sh").read_text()
    assert '--secret "id=pip_cert,src=$CA"' in script
    assert not re.search(r"--build-arg\s+\S*(cert|proxy|ca_bundle)", script, re.IGNORECASE)


def _host_only_ca():
    spec = importlib.util.spec_from_file_location("host_only_ca", REPO / "hack" / "image" / "host_only_ca.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_host_only_ca_finds_the_certificates_the_public_bundles_lack(tmp_path):
    pem = "-----BEGIN CERTIFICATE-----\n{}\n-----END CERTIFICATE-----\n"
    public = pem.format("QUFB\nQkJC\nQ0ND")  # base64 lines, as a PEM file has them
    private = pem.format("WFhY\nWVlZ\nWlpa")
    (tmp_path / "host.crt").write_text(public + private)
    (tmp_path / "image.crt").write_text(public)
    (tmp_path / "mozilla").mkdir()
    lines = _host_only_ca().host_only_lines(
        tmp_path / "host.crt", tmp_path / "image.crt", tmp_path / "mozilla"
    )
    assert lines == [b"WVlZ"]  # the private CA's middle line, not the public one's
    assert _host_only_ca().host_only_lines(tmp_path / "host.crt", tmp_path / "host.crt") == []


def test_nothing_is_installed_when_a_container_starts():
    steps = _instructions(REPO / "Dockerfile")
    for keyword, args in steps:
        if keyword in ("ENTRYPOINT", "CMD"):
            command = " ".join(_exec_form(args))
            assert not re.search(r"\b(pip3?|install|uv|conda)\b", command), (keyword, args)
    spec = next(yaml.safe_load_all((REPO / "compiled" / "train.yaml").read_text()))
    for name, executor in spec["deploymentSpec"]["executors"].items():
        assert "pip install" not in json.dumps(executor["container"]), name


def _recipe(makefile: str, target: str) -> str:
    recipe = re.search(rf"^{target}:.*\n((?:\t.*\n?)+)", makefile, re.MULTILINE)
    assert recipe, f"Makefile: no `{target}:` target"
    return re.sub(r"\\\n\t\s*", " ", recipe.group(1))  # continued lines joined


def _make_var(name: str, **variables: str) -> str:
    """The value of a Makefile variable, as make computes it with ``variables`` given on its command line."""
    out = subprocess.run(
        ["make", "--no-print-directory", "-s", "-f", str(REPO / "Makefile"), "-f", "-", "print-var",
         *(f"{k}={v}" for k, v in variables.items())],
        input=f"print-var:\n\t@echo $({name})\n", cwd=REPO, check=True, capture_output=True, text=True)
    return out.stdout.strip()


def test_make_image_builds_the_tag_the_pipeline_runs():
    makefile = (REPO / "Makefile").read_text()
    # cpu by default: the pipeline's image; VARIANT=gpu: the GPU tag, what replicas with gpus > 0 run
    assert _make_var("VARIANT") == "cpu" and _make_var("IMAGE") == DEFAULT_IMAGE
    assert _make_var("IMAGE", VARIANT="gpu") == DEFAULT_GPU_IMAGE == DEFAULT_IMAGE + "-gpu"
    assert _make_var("IMAGE_ARCHIVE").endswith("/tfk8s_0.1.0.tar")  # what make test-e2e imports: cpu
    image = _recipe(makefile, "image")
    # with a Docker engine: docker build, on the Dockerfile's default base unless BASE is given
    assert re.search(
        r"docker build \$\(if \$\(BASE\),--build-arg BASE=\$\(BASE\)\) --build-arg VARIANT=\$\(VARIANT\)"
        r".*-t \$\(IMAGE\) \.", image
    ), image
    assert "docker info" in image  # ... which is the case only where one answers
    # without: hack/image/build.sh (buildah), the same tag
    assert re.search(r"bash hack/image/build.sh --variant \$\(VARIANT\) --image \$\(IMAGE\)", image), image
    assert "VARIANT=cpu or VARIANT=gpu" in image  # any other variant stops with the fix
    archive = _recipe(makefile, "image-archive")
    assert re.search(
        r"hack/image/build.sh --variant \$\(VARIANT\) --image \$\(IMAGE\).*--archive \$\(IMAGE_ARCHIVE\)",
        archive,
    ), archive
    spec = next(yaml.safe_load_all((REPO / "compiled" / "train.yaml").read_text()))
    assert spec["root"]["inputDefinitions"]["parameters"]["image"]["defaultValue"] == DEFAULT_IMAGE
    # every step runs the `image` parameter (test_compile.py follows each placeholder to it)
    assert {e["container"]["image"] for e in spec["deploymentSpec"]["executors"].values()} == {
        "{{$.inputs.parameters['pipelinechannel--image']}}"}


def test_dockerignore_keeps_the_context_small_but_complete():
    ignored = {
        line.strip()
        for line in (REPO / ".dockerignore").read_text().splitlines()
        if line.strip()[:1] not in ("", "#")
    }
    assert {".git", ".venv", "volume", "tests"} <= ignored
    copied = {s for k, a in _instructions(REPO / "Dockerfile") if k == "COPY" for s in _exec_form(a)[:-1]}
    assert not copied & ignored, copied & ignored


# --- the built image (hack/image/build.sh's cache), e2e -----------------------------------------------------

IMAGE_CACHE = Path(
    os.environ.get("TFK8S_IMAGE_CACHE")
    or Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "tfk8s" / "image"
)


def _scan(stream, needles: list[bytes], chunk: int = 1 << 22):
    """Whether any needle occurs in a file object, read in chunks (with an overlap for needles across two)."""
    keep = max(map(len, needles), default=0)
    tail = b""
    while block := stream.read(chunk):
        window = tail + block
        if any(n in window for n in needles):
            return True
        tail = window[-keep:]
    return False


def _leaks(archive: Path, needles: list[bytes], bundle: bytes) -> tuple[list[str], int]:
    """What of the build host's is in a docker-archive's layers: a file with a needle (a line of a host-only
    CA) or byte for byte the host's CA bundle, or a build secret's file; and how many files were read."""
    digest = hashlib.sha256(bundle).hexdigest()
    found, files = [], 0
    with tarfile.open(archive) as outer:
        manifest = json.load(outer.extractfile("manifest.json"))
        for layer in manifest[0]["Layers"]:
            with tarfile.open(fileobj=outer.extractfile(layer), mode="r|*") as inner:
                for member in inner:
                    name = member.name.lstrip("./")
                    if "pip_cert" in name or (name.startswith("run/secrets/") and not member.isdir()):
                        found.append(f"{layer}: {name}")
                    if not member.isfile():
                        continue
                    files += 1
                    data = inner.extractfile(member)  # a stream: read once
                    if bundle and member.size == len(bundle):
                        content = data.read()
                        if hashlib.sha256(content).hexdigest() == digest:
                            found.append(f"{layer}: {name} (the host's CA bundle)")
                        elif any(n in content for n in needles):
                            found.append(f"{layer}: {name} (a CA of the build host's)")
                    elif needles and _scan(data, needles):
                        found.append(f"{layer}: {name} (a CA of the build host's)")
    return found, files


@pytest.mark.e2e
def test_the_built_image_holds_no_ca_or_proxy_of_the_build_host(request, tmp_path):
    """The image hack/image/build.sh built (if it is in its cache): its config (user, env) and every file of
    every layer, as `ctr images import` gets them (the docker-archive): no proxy setting, no CA of the build
    host's (the certificates of its bundle that no public bundle has), no build secret."""
    if "e2e" not in (request.config.option.markexpr or "") and not os.environ.get("TFK8S_TEST_E2E"):
        pytest.skip("reads the whole image (~1 min): run with -m e2e (make test-e2e) or TFK8S_TEST_E2E=1")
    if not shutil.which("buildah") or not (IMAGE_CACHE / "storage").is_dir():
        pytest.skip(f"no image cache at {IMAGE_CACHE} (make image)")
    store = IMAGE_CACHE / "storage"
    driver = os.environ.get("TFK8S_IMAGE_STORAGE_DRIVER") or (
        "overlay" if (store / "overlay").is_dir() else "vfs"
    )
    buildah = [
        "buildah",
        "--root",
        str(store),
        "--runroot",
        str(tmp_path / "run"),
        "--storage-driver",
        driver,
    ]
    if driver == "overlay":  # as hack/image/lib.sh: no bind mount of the store left behind
        buildah += ["--storage-opt", "overlay.skip_mount_home=true"]
    inspect = subprocess.run(
        [*buildah, "inspect", "--type", "image", DEFAULT_IMAGE], check=False, capture_output=True, text=True
    )
    if inspect.returncode != 0:
        pytest.skip(f"no {DEFAULT_IMAGE} in {IMAGE_CACHE}/storage (make image)")
    info = json.loads(inspect.stdout)
    config = info["OCIv1"]["config"]
    assert config["User"] == "10001:10001"
    env = dict(e.split("=", 1) for e in config["Env"])
    assert not [k for k in env if CA_OR_PROXY.fullmatch(k)], env
    assert "TF_USE_LEGACY_KERAS" not in env  # trainer.task sets it, before TensorFlow is imported
    assert env["PATH"].startswith("/opt/venv/bin:") and env["VIRTUAL_ENV"] == "/opt/venv"
    history = json.dumps(info["OCIv1"].get("history", []))  # RUN lines name the secret's mount, nothing else
    assert "BEGIN CERTIFICATE" not in history and not re.search(r"(?i)_proxy=", history), history
    for var in ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy", "ALL_PROXY", "all_proxy"):
        assert not os.environ.get(var) or os.environ[var] not in history, var  # the host's proxy, if any

    archive = IMAGE_CACHE / f"{DEFAULT_IMAGE.rsplit('/', 1)[-1].replace(':', '_')}.tar"
    ident = Path(f"{archive}.id")
    if not (
        archive.is_file() and ident.is_file() and ident.read_text().split() == [info["FromImageID"], "docker"]
    ):
        archive = tmp_path / "image.tar"
        subprocess.run(
            [*buildah, "push", "--quiet", DEFAULT_IMAGE, f"docker-archive:{archive}:{DEFAULT_IMAGE}"],
            check=True,
            env={**os.environ, "TMPDIR": str(tmp_path)},
        )

    host_bundle = Path(os.environ.get("PIP_CERT") or "/etc/ssl/certs/ca-certificates.crt")
    public = [Path("/usr/share/ca-certificates/mozilla")]
    try:
        import certifi

        public.append(Path(certifi.where()))
    except ImportError:
        pass
    needles = _host_only_ca().host_only_lines(host_bundle, *public) if host_bundle.is_file() else []
    with tarfile.open(archive) as outer:
        manifest = json.load(outer.extractfile("manifest.json"))
    assert manifest[0]["RepoTags"] == [DEFAULT_IMAGE]  # the name `ctr images import` gives it
    bundle = host_bundle.read_bytes() if host_bundle.is_file() else b""
    found, files = _leaks(archive, needles, bundle)
    assert files > 1000, files  # the layers were read
    assert not found, found
