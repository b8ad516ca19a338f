"""Fixtures of the two-node e2e tests (``tests/realnode/test_two_nodes.py``), on top of :mod:`tests.realnode.e2e_fixtures` and
:mod:`tests.realnode.e2e_pods`: the second real node (:func:`tests.realnode.realnode.running_second_node`), started once per session
and only when a two-node test runs, the project image imported into its containerd, and per test the
:class:`ProjectPods` handle whose namespace is also checked on the second node's runtime afterwards.

The second node is tainted :data:`tests.realnode.realnode.SECOND_NODE_TAINT`: the launch steps and every one-node test's
pods stay on the first; a two-node job tolerates it (:data:`TOLERATE_SECOND_NODE`, the ``tolerations`` parameter).
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator

import pytest

from tests.realnode import realnode
from tests.realnode.e2e_pods import ProjectPods, RuntimeLedger, image_archive, import_image, wait_for

TOLERATE_SECOND_NODE = ["--tolerations", json.dumps([realnode.SECOND_NODE_TOLERATION])]


@pytest.fixture(scope="session")
def e2e_node2(e2e_cluster) -> Iterator[realnode.RealNode]:
    """The second node, Ready (see the module docstring); stopped at the end of the session."""
    with realnode.running_second_node(e2e_cluster) as node:
        print(f"\nsecond node {node.name} up in {node.timings['up']}s ({node.timings})")
        yield node


@pytest.fixture(scope="session")
def e2e_image2(e2e_node2: realnode.RealNode, e2e_image: str) -> str:
    """The project image imported into the second node's containerd too (nothing is ever pulled)."""
    archive = image_archive()
    assert archive is not None  # e2e_image skipped otherwise
    seconds = import_image(e2e_node2, archive, e2e_image)
    print(f"\nimported {e2e_image} into {e2e_node2.name} in {seconds:.1f}s")
    return e2e_image


@pytest.fixture(scope="session")
def e2e_runtime2(e2e_node2: realnode.RealNode) -> Iterator[RuntimeLedger]:
    """The second node's :class:`RuntimeLedger`: at the end of the session every two-node test's containers
    must be gone from its runtime too (the kubelet's container GC)."""
    ledger = RuntimeLedger(e2e_node2)
    yield ledger
    left = ledger.wait_all()
    assert not left, f"containers the second node's kubelet did not remove after their pods went: {left}"


@pytest.fixture
def two_nodes(e2e_pods: ProjectPods, e2e_image2: str, e2e_runtime2: RuntimeLedger) -> Iterator[ProjectPods]:
    """The test's :class:`ProjectPods` with both nodes up; afterwards no process of its namespace runs in the
    second node's runtime either (once its pods are gone), and its containers are checked at the session's
    end."""
    yield e2e_pods
    ns = e2e_pods.namespace
    wait_for(lambda: not e2e_pods.core.list_namespaced_pod(ns, field_selector=(
        f"spec.nodeName={realnode.NODE2_NAME}")).items, f"the pods of {ns} on the second node gone", 60)
    try:
        wait_for(lambda: not e2e_runtime2.running(ns), f"no process of {ns} in the second node's runtime", 30)
    finally:
        e2e_runtime2.pending[ns] = time.monotonic()


__all__ = ["TOLERATE_SECOND_NODE", "e2e_image2", "e2e_node2", "e2e_runtime2", "two_nodes"]
