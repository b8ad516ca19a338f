"""Benchmark 5, the Kubernetes launcher at scale: API requests, creation time and verdict latency.

    python bench/launcher_scale.py [--replicas 8,64,256]

Runs the real Kubernetes backend (``tfk8s.launcher.kubernetes.backend`` through ``run_kubernetes``, the real ``kubernetes``
client) against the **real control plane** of the cluster tests (``tests/controlplane.py``: etcd,
kube-apiserver, controller manager, scheduler and KWOK fake nodes, built by ``make test-cluster``; the fake
kubelet of ``tests/fake_kubelet.py`` plays the pods; the launcher runs as the ``tfk8s-launcher``
ServiceAccount), or, where those binaries are not built (``--backend kmock``, and ``--smoke``), against the
**kmock emulator** of ``tests/kube_fixtures.py`` (an aiohttp API server in this process with a fake Job
controller; the benchmark plays the kubelet), whose latencies are those of one Python event loop. The line
of each figure says which.

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
- ``launcher_create_vs_one_by_one_N = seconds from launch to all replicas created, concurrently / one after
  the other`` (the same launcher with ``tfk8s.launcher.kubernetes.parallel`` limited to one request at a time, measured in
  the same run; goal <= 1);
- ``launcher_create_s_N``: the same time against the first size's scaled linearly (``t_N / (t_8 * N / 8)``;
  goal <= 1: creation grows sublinearly);
- ``launcher_cleanup_vs_one_by_one_N = seconds from the verdict to the end of the cleanup (every Job, Service
  and pod deleted and gone), deletes concurrent / one after the other`` (the same comparison; goal <= 1).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import functools
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import Figure, common_args, report, usable_cores

NOTE = "kmock emulator (tests/kube_fixtures.py), not a real control plane"
NOTE_CP = "real control plane (tests/controlplane.py: etcd, apiserver, controllers, scheduler, KWOK nodes)"


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

    kinds = ("pods", "jobs", "services")
    return sum(1 for r in requests if r.resource is not None and r.resource.plural in kinds
               and (r.action == enums.action.CREATE or r.name is not None))


def measure(n: int, wait_s: float = 2.0) -> dict:
    """Launch a job of ``n`` workers on a fresh emulated cluster; returns the counts and times."""
    from tests.kube_fixtures import JOBS, PODS, running_cluster
    from tfk8s.core.cluster import ReplicaCounts
    from tfk8s.core.job import TrainingJob
    from tfk8s.launcher.kubernetes.settings import KubernetesSettings

    job = TrainingJob(f"bench-{n}", ReplicaCounts(worker=n), ("python", "-m", "trainer.task"),
                      success_policy="AllWorkers", grace_period_s=0.0, stop_grace_s=0)
    settings = dataclasses.replace(
        KubernetesSettings.from_params(namespace="tfk8s-test", image="img:1"),
        log_wait_s=0.5, cleanup_timeout_s=60, create_retry_s=2)
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
        _end_times(out, verdict_at)
        out["end_requests"] = len(c.requests()) - out["end_start"]
    return out


class _Counter:
    """Counts the requests an ``ApiClient`` sends (wraps its ``request``): ``(monotonic time, method, url)``."""

    def __init__(self, api) -> None:
        self.calls: list[tuple[float, str, str]] = []
        self._lock = threading.Lock()
        real = api.request

        def request(method, url, *args, **kwargs):
            with self._lock:
                self.calls.append((time.monotonic(), method, url))
            return real(method, url, *args, **kwargs)

        api.request = request

    def since(self, t: float) -> list[tuple[float, str, str]]:
        with self._lock:
            return [c for c in self.calls if c[0] >= t]


def _is_watch_or_log(url: str) -> bool:
    return "watch=True" in url or "watch=true" in url or url.split("?")[0].endswith("/log")


def _about_one(method: str, url: str) -> bool:
    """A request about one replica's object: a create of a Job, Service or pod, or a URL naming one
    (``.../jobs/<name>``), or the events of one (``involvedObject.name=``); the job-level ones (lists by label,
    the job's NetworkPolicy, events by reason) are not."""
    parts = url.split("?")[0].rstrip("/").rsplit("/", 2)
    kinds = ("jobs", "services", "pods")
    named_events = parts[-1] == "events" and "involvedObject.name" in url.replace("%2E", ".")
    return (method == "POST" and parts[-1] in kinds) or parts[-2] in kinds or named_events


def _end_times(out: dict, verdict_at: list[float]) -> None:
    """``out["verdict_s"]`` (last replica's final status -> the launcher's verdict) and ``out["cleanup_s"]``
    (verdict -> cleanup done: the verdict is logged before the cleanup starts), seconds; NaN without a verdict."""
    nan = float("nan")
    out["verdict_s"] = verdict_at[0] - out["last_status_at"] if verdict_at else nan
    out["cleanup_s"] = out["t0"] + out["cleanup_done_s"] - verdict_at[0] if verdict_at else nan


@contextlib.contextmanager
def one_by_one(enabled: bool):
    """While inside (``enabled``), the backend creates (and in its cleanup deletes) its Services and Jobs one
    after the other, as before :mod:`tfk8s.launcher.kubernetes.parallel`: the side-by-side baseline of the creation and
    cleanup figures."""
    from tfk8s.launcher.kubernetes import cleanup, creation

    real = creation.run_all
    if enabled:
        creation.run_all = cleanup.run_all = functools.partial(real, max_workers=1)
    try:
        yield
    finally:
        creation.run_all = cleanup.run_all = real


def measure_control_plane(n: int, wait_s: float, nodes: int) -> dict:
    """The same as :func:`measure` on the real control plane of ``tests/controlplane.py`` (etcd, kube-apiserver,
    controller manager, scheduler, KWOK nodes) with the fake kubelet of ``tests/fake_kubelet.py``; the launcher
    authenticates as the ``tfk8s-launcher`` ServiceAccount of ``manifests/rbac.yaml``."""
    import tempfile
    import uuid

    from tests.cluster_fixtures import RealCluster, add_node, node_name, wait
    from tests.controlplane import free_port, running_control_plane
    from tests.fake_kubelet import FakeKubelet
    from tfk8s.core.cluster import ReplicaCounts
    from tfk8s.core.job import TrainingJob
    from tfk8s.launcher.kubernetes import run_kubernetes
    from tfk8s.launcher.kubernetes.settings import KubernetesSettings

    out: dict = {}
    with tempfile.TemporaryDirectory(prefix="bench-cp-") as work:
        port = free_port()
        with running_control_plane(Path(work), port) as cp:
            kubelet = FakeKubelet(cp.admin_client, cp.pki.path("kubelet.crt"), cp.pki.path("kubelet.key"), port)
            kubelet.start()
            try:
                from kubernetes import client

                with cp.admin_client() as admin:
                    core = client.CoreV1Api(admin)
                    for i in range(nodes):
                        add_node(core, node_name(i), "64", "256Gi")
                    wait(lambda: len(core.list_node().items) == nodes, f"{nodes} nodes", 60)
                c = RealCluster(cp, kubelet, f"bench-{uuid.uuid4().hex[:6]}")
                c.create_namespace()
                job = TrainingJob(f"bench-{n}", ReplicaCounts(worker=n), ("python", "-m", "trainer.task"),
                                  success_policy="AllWorkers", grace_period_s=0.0, stop_grace_s=0)
                settings = dataclasses.replace(
                    KubernetesSettings.from_params(namespace=c.namespace, image="img:1", cpu="10m", memory="16Mi"),
                    log_wait_s=0.5, cleanup_timeout_s=300)
                api = c.launcher_client()
                counter = _Counter(api)
                verdict_at: list[float] = []

                def sink(line: str) -> None:
                    if not verdict_at and " succeeded in " in line and line.startswith("[launcher]"):
                        verdict_at.append(time.monotonic())

                def script() -> None:
                    c.job_name = job.name
                    c.wait_for(lambda: len(c.pods()) >= n, f"{n} pods", 300)
                    calls = counter.since(out["t0"])
                    # launch -> the last Job create sent (the Job controller then makes its pod)
                    out["created_s"] = max(t for t, m, u in calls if m == "POST" and "/jobs" in u) - out["t0"]
                    launch = [x for x in calls if not _is_watch_or_log(x[2])]
                    out["launch_requests"] = len(launch)
                    out["launch_per_replica"] = sum(1 for _, m, u in launch if _about_one(m, u))
                    c.wait_for(lambda: all(c.running(p) for p in c.pods()), "every pod Running", 300)
                    time.sleep(wait_s)
                    t_wait = time.monotonic()
                    out["logs"] = sum(1 for _, _, u in counter.since(out["t0"]) if u.split("?")[0].endswith("/log"))
                    time.sleep(wait_s)
                    during = counter.since(t_wait)
                    out["wait_requests"] = sum(1 for _, _, u in during if not _is_watch_or_log(u))
                    out["wait_watch_or_log"] = len(during) - out["wait_requests"]
                    pods = c.pods()
                    for i, pod in enumerate(pods):
                        if i == len(pods) - 1:
                            out["last_status_at"] = time.monotonic()
                        kubelet.terminate(pod, 0)

                errors: list[BaseException] = []

                def play() -> None:
                    try:
                        script()
                    except BaseException as e:  # noqa: BLE001 - reported below
                        errors.append(e)

                thread = threading.Thread(target=play, daemon=True)
                out["t0"] = time.monotonic()
                thread.start()
                run_kubernetes(job, settings, api_client=api, log_sink=sink)
                out["cleanup_done_s"] = time.monotonic() - out["t0"]
                thread.join(30)
                if errors:
                    raise errors[0]
                _end_times(out, verdict_at)
                c.close()
            finally:
                kubelet.stop()
    return out


def main(argv: list[str] | None = None) -> list[Figure]:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--replicas", default="8,64,256", help="comma-separated job sizes (the first is the base)")
    p.add_argument("--wait-s", type=float, default=2.0, help="seconds observed while every replica runs")
    p.add_argument("--backend", choices=("auto", "controlplane", "kmock"), default="auto",
                   help="auto: the real control plane when its binaries are built (make test-cluster), else kmock")
    p.add_argument("--nodes", type=int, default=4, help="fake nodes of the control plane (64 CPUs each)")
    common_args(p, reps=1)
    a = p.parse_args(argv)
    sizes = [int(x) for x in a.replicas.split(",")]
    if a.smoke:
        sizes, a.wait_s, a.backend = [2, 4], 0.5, "kmock"
    if a.backend == "auto":
        from tests.controlplane import binaries_dir

        a.backend = "controlplane" if binaries_dir() is not None else "kmock"
    figures: list[Figure] = []
    base: tuple[int, float] | None = None
    for n in sizes:
        def run(n: int = n) -> dict:
            return measure(n, a.wait_s) if a.backend == "kmock" else measure_control_plane(n, a.wait_s, a.nodes)

        r = run()
        with one_by_one(True):
            seq = run()
        print(f"  {n} replicas: {r}\n  {n} replicas, created one by one: {seq}", file=sys.stderr, flush=True)
        note = NOTE if a.backend == "kmock" else NOTE_CP
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
        figures.append(Figure(f"launcher_cleanup_vs_one_by_one_{n}", r["cleanup_s"], "concurrent", seq["cleanup_s"],
                              "one_by_one", "s", "<= 1", usable_cores(),
                              f"verdict -> every Job, Service and pod of the {n} replicas deleted and gone, side by "
                              f"side; {note}"))
        figures.append(Figure(f"launcher_create_vs_one_by_one_{n}", r["created_s"], "concurrent", seq["created_s"],
                              "one_by_one", "s", "<= 1", usable_cores(),
                              f"launch -> all {n} replicas' Jobs created, side by side; {note}"))
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
