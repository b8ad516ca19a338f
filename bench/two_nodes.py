"""Benchmark 8, MultiWorkerMirroredStrategy across the two real nodes of ``make test-e2e`` (:mod:`tests.realnode.realnode`).

    python bench/two_nodes.py [--reps 2] [--epochs 8]     # as root, after `make test-e2e` built everything

Brings up the real cluster and its second node (its own network namespace, reached over a veth from the first
node's bridge; host-gw routes: :func:`tests.realnode.realnode.running_second_node`), imports the project image into both
nodes' containerd, and runs the launch step in a pod (as the e2e tests do) with 2 MWMS workers, 2,048 MNIST
examples per epoch at global batch 64, placed two ways, interleaved:

- ``across``: ``spread=required`` and the second node tolerated: one worker per node, every all-reduce crosses
  the link (veth, the first node's bridge, the second node's namespace forwarding onto its pods' bridge);
- ``one_node``: both workers pinned to the first node (``node_selector``), the all-reduce between two pods on
  one bridge.

Figure ``two_nodes_examples_per_s``: the steady examples/s (the median over epochs 2..N of worker-0's
``examples/sec``, which the trainer prints per epoch; the first epoch traces the step function) across nodes /
on one node: the link's cost. Both nodes share this machine's cores, so it measures the network path (a veth,
a bridge, forwarding in a namespace, netfilter on both nodes), not a slower wire.

Where the cluster cannot run here (not root, binaries or image not built) and with ``--smoke``, it prints why
and no figure.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import Figure, common_args, interleaved, median, report, reps_of, usable_cores
from bench.real_cluster import project_pods, skipped

NOTE = ("two real nodes (tests/realnode/realnode.py: the second in its own network namespace, veth + host-gw routes); "
        "launcher in a pod; MWMS 2 workers, 2048 examples per epoch, batch 64, 250m CPU requested per replica")


def steady_rate(log: str, epochs: int) -> float:
    """The median ``examples/sec`` of epochs 2..``epochs`` in a replica's log (``epoch k/N: ... examples/sec=R
    time=T``).

    Raises:
        ValueError: the log has fewer than 2 of those epochs.
    """
    rates = [float(r) for k, r in re.findall(rf"^epoch (\d+)/{epochs}: .*examples/sec=(\d+(?:\.\d+)?) ", log,
                                              re.MULTILINE) if int(k) >= 2]
    if not rates:
        raise ValueError(f"no epoch 2..{epochs} with examples/sec in the log: {log[-1500:]!r}")
    return median(rates)


def measure(p, placement: str, epochs: int, tag: str) -> float:
    """One 2-worker job placed ``across`` the nodes or on ``one_node``; worker-0's steady examples/s."""
    from tests.realnode.e2e_pods import small_job, unique
    from tests.realnode.realnode import NODE_NAME
    from tests.realnode.two_nodes import TOLERATE_SECOND_NODE

    run = unique(f"bench-{tag}")
    flags = small_job(epochs=epochs)
    if placement == "across":
        flags += ["--spread", "required", *TOLERATE_SECOND_NODE]
    else:
        overrides = json.loads(flags[flags.index("--replica-overrides") + 1])
        overrides["worker"]["node_selector"] = {"kubernetes.io/hostname": NODE_NAME}
        flags[flags.index("--replica-overrides") + 1] = json.dumps(overrides)
        flags += ["--spread", "none"]
    launcher = p.launch(run, "--workers", "2", *flags)
    pod = p.e2e.wait_phase(launcher, "Succeeded", "Failed", timeout=600)
    assert pod["status"]["phase"] == "Succeeded", p.tail(launcher)
    rate = steady_rate(p.replica_log(run, "worker-0"), epochs)
    print(f"  {placement}: {rate:.0f} examples/s", file=sys.stderr, flush=True)
    return rate


def run(reps: int, epochs: int, cache_dir: str) -> list[Figure]:
    """Bring both nodes up, measure, tear everything down; the figure."""
    with project_pods("two_nodes", cache_dir, second_node=True) as p:
        rates = interleaved({"across": lambda: measure(p, "across", epochs, "x"),
                             "one_node": lambda: measure(p, "one_node", epochs, "1")}, reps)
    return [Figure("two_nodes_examples_per_s", median(rates["across"]), "across_nodes", median(rates["one_node"]),
                   "one_node", "examples/s", "", usable_cores(),
                   f"{NOTE}; steady (epochs 2..{epochs}) examples/s of worker-0, median of {reps} interleaved")]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    common_args(p, reps=2)
    p.add_argument("--epochs", type=int, default=8, help="epochs per job (default: %(default)s)")
    a = p.parse_args(argv)
    if not skipped("two_nodes", a.smoke, "the two real nodes", a.out):
        report(run(reps_of(a), a.epochs, a.cache_dir), a.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
