"""Shared fixtures about data: the real MNIST TFDS data_dir and a small prepared subset of it."""

from __future__ import annotations

from pathlib import Path

import pytest

CLUSTER_ENV = "TFK8S_TEST_CLUSTER"  # set by `make test-cluster`: run the tests marked cluster
E2E_ENV = "TFK8S_TEST_E2E"  # set by `make test-e2e`: run the tests marked e2e (a real node on this machine)
BENCH_ENV = "TFK8S_TEST_BENCH"  # set by `make bench-smoke`: run the tests marked bench (the benchmarks, tiny)
KFP_ENV = "TFK8S_TEST_KFP"  # set by `make test-kfp`: run the tests marked kfp (a KFP backend, its MLMD adapter)


def pytest_configure(config):
    """Ctrl-C reaches the tests that send it. A shell without job control starts a command put in the background
    (``make test &``, ``nohup ... &``) with SIGINT ignored, and every process started from it inherits that
    (an ignored signal stays ignored across exec): the launcher then rightly leaves Ctrl-C alone, as a
    background job should, and the SIGINT tests fail. Here the default is put back for this process and so for
    the runs it starts."""
    import signal

    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


def pytest_collection_modifyitems(config, items):
    """The ``cluster`` tests (a real control plane) run only under ``make test-cluster``, the ``e2e`` tests (a
    real node) only under ``make test-e2e``, the ``bench`` tests (every benchmark's smoke run, about 2 minutes)
    only under ``make bench-smoke``, the ``kfp`` tests (a KFP backend built from a KFP source tree, the ML Metadata
    adapter) only under ``make test-kfp``; elsewhere they are deselected, and the summary says so in a line."""
    import os

    for marker, env in (("cluster", CLUSTER_ENV), ("e2e", E2E_ENV), ("bench", BENCH_ENV), ("kfp", KFP_ENV)):
        if os.environ.get(env) == "1":
            continue
        chosen = [item for item in items if item.get_closest_marker(marker)]
        if chosen:
            items[:] = [item for item in items if not item.get_closest_marker(marker)]
            config.hook.pytest_deselected(items=chosen)
            setattr(config, f"_tfk8s_{marker}_deselected", len(chosen))


def pytest_terminal_summary(terminalreporter, config):
    """One line about each kind of deselected real-cluster tests."""
    n = getattr(config, "_tfk8s_cluster_deselected", 0)
    if n:
        terminalreporter.write_line(f"{n} real-cluster tests not run: real-cluster tests need `make test-cluster`")
    n = getattr(config, "_tfk8s_e2e_deselected", 0)
    if n:
        terminalreporter.write_line(f"{n} real-node tests not run: they need `make test-e2e`")
    n = getattr(config, "_tfk8s_bench_deselected", 0)
    if n:
        terminalreporter.write_line(f"{n} benchmark smoke runs not run: they are `make bench-smoke`")
    n = getattr(config, "_tfk8s_kfp_deselected", 0)
    if n:
        terminalreporter.write_line(f"{n} Kubeflow Pipelines tests not run: they need `make test-kfp`")

class StraySigtermError(Exception):
    """A SIGTERM reached pytest's own process while no launcher under test was handling it."""


@pytest.fixture(autouse=True)
def _a_stray_sigterm_fails_the_test_not_the_session():
    """Many tests stop the launcher under test by sending SIGTERM to this process (it runs in the main thread).
    One sent a moment too early or too late (a loaded machine, a launcher that just returned) would meet
    SIGTERM's default action and kill the whole pytest session; here it fails the test it hit instead, by name.
    The launcher's own handlers (tfk8s.launcher.stopping) stack on top of this one as on any previous handler."""
    import signal

    def stray(signum, frame):
        raise StraySigtermError("SIGTERM reached the pytest process outside a launcher's handlers: a test sent "
                                "it too early or after its launcher returned")

    previous = signal.signal(signal.SIGTERM, stray)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


# A real MNIST subset, prepared once per session: the first SUBSET_EXAMPLES examples of each split, in TFDS
# order, written round-robin into SUBSET_SHARDS files (a count that does not divide the examples, so shards
# differ by one).
SUBSET_EXAMPLES = 3000
SUBSET_SHARDS = 7


@pytest.fixture(scope="session")
def mnist_tfds_data_dir() -> str:
    """The TFDS data_dir holding real MNIST 3.0.1 (``$TFDS_DATA_DIR`` or ``../shared/data/...``); skips without."""
    from tfk8s.steps.prepare_dataset import default_tfds_data_dir

    data_dir = default_tfds_data_dir()
    if data_dir is None or not (Path(data_dir) / "mnist" / "3.0.1" / "dataset_info.json").is_file():
        pytest.skip("needs real MNIST 3.0.1 in ../shared/data/tensorflow_datasets or $TFDS_DATA_DIR")
    return data_dir


@pytest.fixture(scope="session")
def mnist_subset_dir(tmp_path_factory, mnist_tfds_data_dir) -> Path:
    """A directory prepared by ``prepare_dataset`` from real MNIST: train and test, SUBSET_EXAMPLES each,
    SUBSET_SHARDS shards per split. Read-only for tests: copy it to change it."""
    from tfk8s.steps.prepare_dataset import prepare_dataset

    out = tmp_path_factory.mktemp("mnist_subset")
    prepare_dataset("mnist", out, tfds_data_dir=mnist_tfds_data_dir, num_shards=SUBSET_SHARDS,
                    max_examples=SUBSET_EXAMPLES)
    return out
