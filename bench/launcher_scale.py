"""Benchmark 5, the Kubernetes launcher at scale: API requests, creation time and verdict latency.

    python bench/launcher_scale.py [--replicas 8,64,256]

Runs the real Kubernetes backend (``tfk8s.kube.backend`` through ``run_kubernetes``, the real ``kubernetes``
client) against the **kmock emulator** of ``tests/kube_fixtures.py`` (an aiohttp API server in this process
with a fake Job controller; the benchmark plays the kubelet). Not a real control plane: its latencies are
those of one Python event loop, not of etcd and an apiserver.

Per job of N workers (MultiWorkerMirroredStrategy, success policy ``AllWorkers``) the benchmark waits until
every pod exists, marks them all Running, waits a while, then marks every replica Succeeded (pod and Job
status, as kubelet and Job controller do) and waits for the launcher's verdict. It counts the launcher's
requests (kmock records each) in three phases: launch (until every replica is created and both watches are
open), waiting (while every replica runs: nothing but the watches and one log stream per replica should be
there), and the end.

Figures per N:

- ``launcher_requests_per_replica_N = launch requests about one replica / N`` (goal <= 2; the few per job,
  the lists by label, are said beside it);
- ``launcher_wait_requests_per_replica_N = requests while waiting, besides the watches and log streams,
  / N`` (goal <= 0: none per replica);
- ``launcher_verdict_s_N = seconds from the last replica's final status to the verdict / 1 s`` (goal <= 1);
- ``launcher_create_s_N = seconds from launch to all replicas created`` against the 8-replica time scaled
  linearly (``t_N / (t_8 * N / 8)``; goal <= 1: creation grows sublinearly, i.e. is concurrent).
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import Figure, common_args, report, usable_cores

NOTE = "kmock emulator (tests/kube_fixtures.py), not a real control plane"


def _count(requests, *, skip_watch_and_logs: bool) -> int:
    from kmock._internal import enums

    n = 0
    for r in requests:
        if skip_watch_and_logs and (r.action == enums.action.WATCH or r.subresource == "log"):
            continue
        n += 1
    return n


def _per_replica(requests) -> int:
    """Requests about one object (a create, or a URL naming it); the rest are per job (lists by label)."""
    from kmock._internal import enums

    return sum(1 for r in requests if r.action == enums.action.CREATE or r.name is not None)


def measure(n: int, wait_s: float = 2.0) -> dict:
    """Launch a job of ``n`` workers on a fresh emulated cluster; returns the counts and times."""
    from tests.kube_fixtures import JOBS, PODS, running_cluster
    from tfk8s.cluster import ReplicaCounts
    from tfk8s.kube.settings import KubernetesSettings
    from tfk8s.launcher import TrainingJob

    job = TrainingJob(f"bench-{n}", ReplicaCounts(worker=n), ("python", "-m", "trainer.task"),
                      success_policy="AllWorkers", grace_period_s=0.0)
    settings = dataclasses.replace(
        KubernetesSettings.from_params(namespace="tfk8s-test", image="img:1"),
        log_wait_s=0.5, cleanup_timeout_s=60, create_retry_s=2, stop_grace_period_s=0)
    out: dict = {}
    with running_cluster() as c:
        verdict_at: list[float] = []
        sink = c._print

        def print_with_time(line: str) -> None:
            if not verdict_at and " succeeded in " in line and line.startswith("[launcher]"):
                verdict_at.append(time.monotonic())
            sink(line)

        c._print = print_with_time

        def now_all(kind, pred=lambda o: True) -> list[dict]:
            return [o for o in c.objects(kind) if pred(o)]

        def script(c) -> None:
            from tests.kube_fixtures import _now

            deadline = time.monotonic() + 120
            while c.server.pods_created < n:
                if time.monotonic() > deadline:
                    raise AssertionError(f"only {c.server.pods_created} of {n} pods after 120 s")
                time.sleep(0.002)
            out["created_s"] = time.monotonic() - out["t0"]
            # both watches open (the launcher starts them after creating)
            c.wait_for(lambda: c.count("GET", "pods", watch=True) >= 1 and c.count("GET", "jobs", watch=True) >= 1,
                       "the launcher's watches", timeout=60)
            launch = c.requests()
            out["launch_requests"] = _count(launch, skip_watch_and_logs=True)
            out["launch_per_replica"] = _per_replica(launch)
            pods = now_all("pods")
            for pod in pods:
                c._run(c.server.patch(PODS, c.namespace, pod["metadata"]["name"], {
                    "spec": {"nodeName": "node-1"},
                    "status": {"phase": "Running", "conditions": [{"type": "PodScheduled", "status": "True"},
                                                                  {"type": "Ready", "status": "True"}],
                               "containerStatuses": c._container({"running": {"startedAt": _now()}}, True)}}))
            time.sleep(wait_s)  # the launcher opens one log stream per started replica, then only watches
            before = c.requests()
            out["logs"] = sum(1 for r in before if r.subresource == "log")
            time.sleep(wait_s)
            during = c.requests()[len(before):]
            out["wait_requests"] = _count(during, skip_watch_and_logs=True)
            out["wait_watch_or_log"] = len(during) - out["wait_requests"]
            term = {"exitCode": 0, "reason": "Completed", "startedAt": _now(), "finishedAt": _now()}
            for i, pod in enumerate(pods):
                meta = pod["metadata"]
                if i == len(pods) - 1:
                    out["last_status_at"] = time.monotonic()  # the final status is being written from here
                c._run(c.server.patch(PODS, c.namespace, meta["name"], {
                    "status": {"phase": "Succeeded", "containerStatuses": c._container({"terminated": term})}}))
                c._run(c.server.patch(JOBS, c.namespace, meta["labels"]["job-name"], {"status": {
                    "active": 0, "succeeded": 1, "conditions": [{"type": "SuccessCriteriaMet", "status": "True"},
                                                                {"type": "Complete", "status": "True"}]}}))
            out["end_start"] = len(c.requests())

        from tfk8s.launcher.kubernetes import run_kubernetes

        errors: list[BaseException] = []

        def play() -> None:
            try:
                script(c)
            except BaseException as e:  # noqa: BLE001 - reported below
                errors.append(e)

        thread = threading.Thread(target=play, daemon=True)
        out["t0"] = time.monotonic()
        thread.start()
        run_kubernetes(job, settings, api_client=c.api_client(), log_sink=c._print)
        out["cleanup_done_s"] = time.monotonic() - out["t0"]
        thread.join(10)
        if errors:
            raise errors[0]
        out["verdict_s"] = verdict_at[0] - out["last_status_at"] if verdict_at else float("nan")
        out["end_requests"] = len(c.requests()) - out["end_start"]
    return out


def main(argv: list[str] | None = None) -> list[Figure]:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--replicas", default="8,64,256", help="comma-separated job sizes (the first is the base)")
    p.add_argument("--wait-s", type=float, default=2.0, help="seconds observed while every replica runs")
    common_args(p, reps=1)
    a = p.parse_args(argv)
    sizes = [int(x) for x in a.replicas.split(",")]
    if a.smoke:
        sizes, a.wait_s = [2, 4], 0.5
    figures: list[Figure] = []
    base: tuple[int, float] | None = None
    for n in sizes:
        r = measure(n, a.wait_s)
        print(f"  {n} replicas: {r}", file=sys.stderr, flush=True)
        note = NOTE
        figures += [
            Figure(f"launcher_requests_per_replica_{n}", r["launch_per_replica"] / n, "launch_requests_per_replica",
                   1.0, "one", "requests", "<= 2", usable_cores(),
                   f"{r['launch_per_replica']} requests about one replica + "
                   f"{r['launch_requests'] - r['launch_per_replica']} per job (lists) for {n}; {note}"),
            Figure(f"launcher_wait_requests_per_replica_{n}", r["wait_requests"] / n, "wait_requests_per_replica",
                   1.0, "one", "requests", "<= 0", usable_cores(),
                   f"{r['wait_requests']} requests in {a.wait_s:g}s of waiting besides {r['wait_watch_or_log']} "
                   f"watch/log; {r['logs']} log streams (one per replica); {note}"),
            Figure(f"launcher_verdict_s_{n}", r["verdict_s"], "verdict_after_last_status", 1.0, "goal", "s", "<= 1",
                   usable_cores(), f"cleanup done {r['cleanup_done_s']:.1f}s after launch; {note}"),
        ]
        if base is None:
            base = (n, r["created_s"])
            figures.append(Figure(f"launcher_create_s_{n}", r["created_s"], "created", r["created_s"],
                                  "base", "s", "", usable_cores(), f"the base of the linear scaling; {note}"))
        else:
            linear = base[1] * n / base[0]
            figures.append(Figure(f"launcher_create_s_{n}", r["created_s"], "created", linear,
                                  f"linear_from_{base[0]}", "s", "<= 1", usable_cores(),
                                  f"launch -> all {n} replicas created; {note}"))
    report(figures, a.out)
    return figures


if __name__ == "__main__":
    main()
