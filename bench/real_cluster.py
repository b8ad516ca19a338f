"""What the real-node benchmarks share (bench/real_node.py, bench/two_nodes.py): whether the real cluster of
``make test-e2e`` (:mod:`tests.realnode.realnode`) can be brought up here, and the cluster brought up with the
project image imported, a namespace with the ``tfk8s-launcher`` ServiceAccount and the prepared MNIST data on a
volume, as :class:`tests.realnode.e2e_pods.ProjectPods` (the launch step runs in a pod, as in the e2e tests).
"""

from __future__ import annotations

import os
import sys
import tempfile
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

from bench.common import prepared_mnist, report


def unavailable() -> str:
    """Why the real node cannot be brought up here ("" when it can)."""
    from tests.realnode import realnode
    from tests.realnode.e2e_pods import image_archive

    if os.geteuid() != 0:
        return "needs root (mounts, cgroups, a bridge, iptables)"
    if realnode.node_binaries_dir() is None or realnode.images_dir() is None or realnode.binaries_dir() is None:
        return "the control plane's and the node's binaries are not built (make test-e2e builds them)"
    if image_archive() is None:
        return "no project image archive (make image-archive)"
    if (realnode.ROOT / realnode.STATE).exists():
        return f"another e2e run holds {realnode.ROOT} (the node is this machine's alone)"
    return ""


def skipped(bench: str, smoke: bool, what: str, out: str | None) -> bool:
    """True (after printing why and reporting no figures to ``out``) when benchmark ``bench`` does not bring
    ``what`` ("a real node", "the two real nodes") up: with ``--smoke`` (``make bench-smoke`` runs beside a
    colleague's e2e run, and a node is this machine's alone) or where :func:`unavailable` says why."""
    why = f"--smoke: {what} is not brought up by the smoke run" if smoke else unavailable()
    if why:
        print(f"bench {bench}: skipped, no figures ({why})", flush=True)
        report([], out)
    return bool(why)


def mnist_data(cache_dir: str) -> Path:
    """The prepared MNIST subset the e2e tests use (:data:`tests.realnode.e2e_pods.MNIST_EXAMPLES` examples per
    split, :data:`~tests.realnode.e2e_pods.MNIST_SHARDS` shards), made once under ``cache_dir``
    (:func:`bench.common.prepared_mnist`)."""
    from tests.realnode.e2e_pods import MNIST_EXAMPLES, MNIST_SHARDS

    return prepared_mnist(cache_dir, MNIST_EXAMPLES, MNIST_SHARDS)


@contextmanager
def project_pods(bench: str, cache_dir: str, second_node: bool = False,
                 up: Callable[[Any], None] = lambda cluster: None) -> Iterator[Any]:
    """The real cluster up (and its second node with ``second_node``), the project image imported into every
    node, a namespace ``bench-...`` with the launcher's RBAC and the prepared MNIST data (:func:`mnist_data`) on
    a hostPath volume: the :class:`tests.realnode.e2e_pods.ProjectPods` of that namespace. ``up(cluster)`` is called once the nodes are up (a timing to print). Everything is
    removed at the end, also on an error.

    Raises:
        whatever bringing the nodes up raises (:func:`tests.realnode.realnode.running_real_cluster`).
    """
    from tests.realnode.e2e_fixtures import new_namespace
    from tests.realnode.e2e_pods import (
        ProjectPods,
        apply_rbac,
        image_archive,
        import_image,
        make_volume,
        remove_namespace,
    )
    from tests.realnode.realnode import running_real_cluster, running_second_node
    from tfk8s import DEFAULT_IMAGE

    data = mnist_data(cache_dir)
    work = Path(tempfile.mkdtemp(prefix=f"tfk8s-bench-{bench.replace('_', '-')}-"))
    with ExitStack() as stack:
        cluster = stack.enter_context(running_real_cluster(work))
        nodes = [cluster.node]
        if second_node:
            nodes.append(stack.enter_context(running_second_node(cluster)))
        up(cluster)
        print(f"bench {bench}: {len(nodes)} node(s) up; importing the image", file=sys.stderr, flush=True)
        for node in nodes:
            import_image(node, image_archive())
        e2e = new_namespace(cluster, "bench")
        apply_rbac(e2e)
        volume = make_volume(e2e, data)
        try:
            yield ProjectPods(e2e, DEFAULT_IMAGE, volume)
        finally:
            remove_namespace(e2e, volume)
            e2e.close()


__all__ = ["mnist_data", "project_pods", "skipped", "unavailable"]
