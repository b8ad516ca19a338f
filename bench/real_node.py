"""Benchmark 7, the launch step on the real one-node cluster (``make test-e2e``'s, :mod:`tests.realnode.realnode`).

    python bench/real_node.py [--replicas 2,4] [--reps 1]      # as root, after `make test-e2e` built everything

Brings up the real node (kubelet, containerd, runc, CNI, CoreDNS, kube-proxy on the test control plane), imports
the project image (``make image-archive``'s archive), and runs the launch step **in a pod** as the
``tfk8s-launcher`` ServiceAccount, exactly as the e2e tests do (:mod:`tests.realnode.e2e_pods`): MultiWorkerMirroredStrategy
over N workers, one epoch of 2,048 MNIST examples at global batch 64 on a hostPath PersistentVolume. Per job it
times, from the creation of the launcher's pod:

- ``real_node_running_s_N``: until every replica's pod is ``Running`` (the API's watch: scheduling, the
  sandbox, CNI, the container started), / 1 s;
- ``real_node_first_step_s_N``: until the first training step is reported (the coordinator's progress file on
  the volume says ``step >= 1``: TensorFlow imported, peers found by DNS, the collective set up, the first step
  traced and run), / 1 s;
- ``real_node_vs_local``: the launch step's wall time on the real node (the launcher pod created -> Succeeded)
  / the same training on the local backend (``python -m components.launch_training --backend local``, each
  replica a process on this machine), 2 workers; the two interleaved.

Where the node cannot run here (not root, binaries or image not built) and with ``--smoke`` (``make
bench-smoke`` runs it beside a colleague's e2e run, and a node is this machine's alone), it
prints why and no figure.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import Figure, common_args, interleaved, median, report, reps_of, usable_cores
from bench.real_cluster import mnist_data, project_pods, skipped

NOTE = ("real one-node cluster (tests/realnode/realnode.py: kubelet 1.37, containerd 2.4, runc, CNI bridge, CoreDNS, "
        "kube-proxy); launcher in a pod; MWMS, 2048 examples x 1 epoch, batch 64, 250m CPU requested per replica")
BATCH = 64


def _watch_running(p, job: str, n: int, t0: float, out: dict) -> threading.Thread:
    """Record in ``out["running"]`` the seconds after ``t0`` when ``n`` pods of ``job`` are Running."""
    from tests.realnode.e2e_pods import wait_for

    def run() -> None:
        def all_running() -> bool:
            pods = [x for x in p.pods_of(job) if not x["metadata"].get("deletionTimestamp")]
            return len(pods) == n and all(x["status"].get("phase") == "Running" for x in pods)

        wait_for(all_running, f"{n} Running pods", 300, poll_s=0.1)
        out["running"] = time.monotonic() - t0

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t


def measure_real(p, workers: int, tag: str) -> dict:
    """One job of ``workers`` MWMS workers launched in a pod; seconds to all Running, to the first step, to
    the launcher pod's success."""
    from tests.realnode.e2e_pods import MOUNT, small_job, unique, wait_for
    from tfk8s.core.layout import RunLayout

    run = unique(f"bench-{tag}")
    job = p.job_of(run)
    progress = p.volume.host(RunLayout(MOUNT, run).train_dir) / "progress" / "worker-0.json"
    out: dict = {}
    t0 = time.monotonic()
    launcher = p.launch(run, "--workers", str(workers), *small_job(batch=BATCH))
    watcher = _watch_running(p, job, workers, t0, out)

    def first_step() -> bool:
        try:
            return int(json.loads(progress.read_text()).get("step") or 0) >= 1
        except (OSError, ValueError):
            return False

    wait_for(first_step, "the first training step", 300, poll_s=0.1, explain=lambda: p.tail(launcher))
    out["first_step"] = time.monotonic() - t0
    pod = p.e2e.wait_phase(launcher, "Succeeded", "Failed", timeout=300)
    out["wall"] = time.monotonic() - t0
    assert pod["status"]["phase"] == "Succeeded", p.tail(launcher)
    watcher.join(5)
    for line in _startup_lines(p, launcher, p.volume.host(RunLayout(MOUNT, run).train_dir)):
        print(f"    {line}", file=sys.stderr, flush=True)
    print(f"  real node, {workers} workers: Running {out.get('running', float('nan')):.1f}s, first step "
          f"{out['first_step']:.1f}s, launch step {out['wall']:.1f}s", file=sys.stderr, flush=True)
    return out


def _startup_lines(p, launcher: str, train_dir: Path) -> list[str]:
    """The replicas' ``startup: ...`` lines (trainer/task.py's StartupTimer: where each replica's seconds went
    until its first step), from the launcher's log, else from the replica logs kept on the volume."""
    try:
        lines = [ln.strip() for ln in p.e2e.log(launcher).splitlines() if "startup: " in ln]
    except Exception:  # noqa: BLE001 - information only
        lines = []
    if not lines:
        for f in sorted(train_dir.rglob("*.log")):
            lines += [f"[{f.stem}] {ln.strip()}" for ln in f.read_text(errors="replace").splitlines()
                      if ln.startswith("startup: ")]
    return lines


def measure_local(data_dir: Path, workers: int) -> float:
    """The same training on the local backend: the launch step's wall time (seconds)."""
    from bench.common import REPO, python_env

    with tempfile.TemporaryDirectory(prefix="tfk8s-bench-local-") as root:
        t0 = time.monotonic()
        proc = subprocess.run([sys.executable, "-m", "components.launch_training", "--backend", "local",
                               "--data-dir", str(data_dir), "--volume-root", root, "--run-id", "bench-local",
                               "--workers", str(workers), "--epochs", "1", "--batch-size", str(BATCH)],
                              cwd=REPO, env=python_env(), capture_output=True, text=True, timeout=600, check=False)
        wall = time.monotonic() - t0
    if proc.returncode != 0:
        raise RuntimeError(f"the local launch step failed:\n{(proc.stdout + proc.stderr)[-3000:]}")
    print(f"  local backend, {workers} workers: launch step {wall:.1f}s", file=sys.stderr, flush=True)
    return wall


def run(replicas: list[int], reps: int, cache_dir: str, local: bool = True) -> list[Figure]:
    """Bring the node up, measure, tear it down; the figures."""
    real: dict[int, list[dict]] = {n: [] for n in replicas}
    walls: dict[str, list[float]] = {}

    def up(cluster) -> None:
        print(f"bench real_node: node up ({cluster.node.timings})", file=sys.stderr, flush=True)

    with project_pods("real_node", cache_dir, up=up) as p:
        for n in replicas:
            for r in range(reps):
                real[n].append(measure_real(p, n, f"{n}w{r}"))
        if local:
            variants = {"real_node": lambda: measure_real(p, 2, "cmp")["wall"],
                        "local": lambda: measure_local(mnist_data(cache_dir), 2)}
            walls = interleaved(variants, reps)
    cores = usable_cores()
    figures = []
    for n in replicas:
        figures.append(Figure(f"real_node_running_s_{n}", median([m["running"] for m in real[n] if "running" in m]),
                              "launch_to_all_running", 1.0, "unit", "s", "", cores, f"{NOTE}; {n} workers"))
        figures.append(Figure(f"real_node_first_step_s_{n}", median([m["first_step"] for m in real[n]]),
                              "launch_to_first_step", 1.0, "unit", "s", "", cores, f"{NOTE}; {n} workers"))
    if not walls:
        return figures
    figures.append(Figure("real_node_vs_local", median(walls["real_node"]), "real_node", median(walls["local"]),
                          "local_backend", "s", "", cores,
                          f"{NOTE}; launch step wall time, 2 workers, median of {reps} interleaved"))
    return figures


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    common_args(p, reps=1)
    p.add_argument("--replicas", default="2,4", help="worker counts to time (default: %(default)s)")
    p.add_argument("--no-local", action="store_true",
                   help="leave out real_node_vs_local (its two extra jobs): a shorter hold of the node")
    a = p.parse_args(argv)
    if not skipped("real_node", a.smoke, "a real node", a.out):
        report(run([int(x) for x in a.replicas.split(",")], reps_of(a), a.cache_dir, local=not a.no_local), a.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
