"""`make test` leaves the real-cluster tests out and says so in one line; `make test-cluster` runs them."""

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_cluster_tests_are_deselected_outside_make_test_cluster_with_one_line_saying_so():
    env = {k: v for k, v in os.environ.items() if k != "TFK8S_TEST_CLUSTER"}
    out = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--co",
                          "tests/realcluster/test_backend.py"], cwd=REPO, env=env, capture_output=True, text=True,
                         timeout=120, check=False)  # exit 5: nothing selected to run
    lines = [line for line in out.stdout.splitlines() if "real-cluster tests" in line]
    assert len(lines) == 1 and lines[0].endswith("real-cluster tests need `make test-cluster`"), out.stdout
    assert int(lines[0].split()[0]) >= 15  # every scenario of tests/realcluster/test_backend.py
    assert "test_kube_cluster.py::" not in out.stdout  # none collected to run


def test_make_test_cluster_builds_then_runs_only_the_cluster_tests():
    recipe = (REPO / "Makefile").read_text().split("\ntest-cluster:", 1)[1].split("\n\n", 1)[0]
    assert "hack/controlplane/build.sh" in recipe and "TFK8S_TEST_CLUSTER=1" in recipe and "-m cluster" in recipe
    assert recipe.index("hack/kueue/build.sh") < recipe.index("TFK8S_TEST_CLUSTER=1")  # the real Kueue, cached
    steps = [line for line in (REPO / ".ci" / "run").read_text().splitlines() if line.startswith("make ")]
    assert steps == ["make test", "make bench-smoke", "make test-cluster", "make test-e2e", "make test-kfp"]


def test_make_test_kfp_gets_chromium_before_anything_long_or_fails_saying_what_to_install(tmp_path):
    """Issue 34: `make test-kfp` from a fresh clone skipped the KFP UI test ("chromium is not installed"): only
    .ci/run installed Chromium. The target installs it first (hack/kfp/chromium.sh, apt-get), or fails at once
    saying what to install; with a Chromium on PATH it does nothing."""
    recipe = (REPO / "Makefile").read_text().split("\ntest-kfp:", 1)[1].split("\n\n", 1)[0]
    assert "set -e; bash hack/kfp/chromium.sh; bash hack/kfp/build.sh;" in recipe
    script = str(REPO / "hack" / "kfp" / "chromium.sh")
    bare = tmp_path / "bin"  # neither a Chromium nor apt-get
    bare.mkdir()
    done = subprocess.run(["/bin/bash", script], env={"PATH": str(bare)}, capture_output=True, text=True, timeout=60,
                          check=False)
    assert done.returncode == 1 and done.stdout == ""
    assert done.stderr == ("test-kfp: the KFP UI test (tests/realnode/test_kfp_ui.py) needs Chromium, and it could "
                           "not be installed: run apt-get install -y chromium (as root), or put chromium on PATH, "
                           "then make test-kfp again\n")
    (bare / "chromium").write_text("#!/bin/sh\n")
    (bare / "chromium").chmod(0o755)
    done = subprocess.run(["/bin/bash", script], env={"PATH": str(bare)}, capture_output=True, text=True, timeout=60,
                          check=False)
    assert (done.returncode, done.stdout, done.stderr) == (0, "", "")
