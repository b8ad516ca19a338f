"""Benchmark 5, the Kubernetes launcher at scale: API requests, creation time and verdict latency.

    python bench/launcher_scale.py [--replicas 8,64,256,1024]

Runs the real Kubernetes backend (``tfk8s.launcher.kubernetes.backend`` through ``run_kubernetes``, the real ``kubernetes``
client) against the **real control plane** of the cluster tests (``tests/realcluster/controlplane.py``: etcd,
kube-apiserver, controller manager, scheduler and KWOK fake nodes, built by ``make test-cluster``; the fake
kubelet of ``tests/realcluster/fake_kubelet.py`` plays the pods; the launcher runs as the ``tfk8s-launcher``
ServiceAccount), or, where those binaries are not built (``--backend kmock``, and ``--smoke``), against the
**kmock emulator** of ``tests/fakes/kube_fixtures.py`` (an aiohttp API server in this process with a fake Job
controller; the benchmark plays the kubelet), whose latencies are those of one Python event loop. The line
of each figure says which.

Per job of N workers (MultiWorkerMirroredStrategy, success policy ``AllWorkers``) the benchmark waits until
every pod exists, marks them all Running, waits a while, then marks every replica Succeeded (pod and Job
status, as kubelet and Job controller do) and waits for the launcher's verdict. It counts the launcher's
requests (kmock records each) in three phases: launch (until every replica is created and both watches are
open), waiting (while every replica runs: nothing but the watches and the log streams followed live should be
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
  and pod deleted and gone), deletes concurrent / one after the other`` (the same comparison; goal <= 1);
- on the real control plane, where the launcher runs in a process of its own: ``launcher_cpu_ms_per_replica_N``
  (its user + system CPU from launch to the end of the cleanup, all threads), ``launcher_peak_rss_N`` (its peak
  resident set against its own after the imports), and each size against the one before it scaled linearly,
  ``launcher_cpu_vs_linear_N`` and ``launcher_memory_vs_linear_N`` (peak memory above the imports; goal <= 1
  for both: nothing the launcher spends grows faster than the replica count).
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

NOTE = "kmock emulator (tests/fakes/kube_fixtures.py), not a real control plane"
NOTE_CP = "real control plane (tests/realcluster/controlplane.py: etcd, apiserver, controllers, scheduler, KWOK nodes)"


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
    from tests.fakes.kube_fixtures import JOBS, PODS, running_cluster
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
            from tests.fakes.kube_fixtures import _now

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
            time.sleep(wait_s)  # the launcher follows the coordinator's and up to 16 others' logs, then only watches
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


def _vm_rss_kib() -> int:
    """This process's resident set now, KiB (``VmRSS`` of ``/proc/self/status``; 0 where there is none)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def launcher_child(spec: dict) -> dict:
    """The launcher of :func:`measure_control_plane`, in a process of its own (``--child``), so that its CPU
    seconds and peak memory are the launcher's alone, not the fake kubelet's or the benchmark's.

    Args:
        spec: ``url``, ``ca`` (the API server and its CA file), ``token`` (the ``tfk8s-launcher``
            ServiceAccount's), ``namespace``, ``n`` (workers), ``one_by_one`` (bool, :func:`one_by_one`).

    Returns:
        ``t0`` / ``done`` (``time.monotonic()``: the launch and the end of the cleanup; the clock is the
        machine's, so the parent compares it with its own), ``verdict_at`` (list, empty without a verdict),
        ``calls`` (every request: ``[time, method, url]``), ``cpu_s`` (user + system seconds of the launch,
        all threads), ``rss_start_kib`` (resident set after the imports, before the launch) and
        ``peak_rss_kib`` (the process's peak resident set, ``ru_maxrss``).
    """
    import resource

    from kubernetes import client

    from tfk8s.core.cluster import ReplicaCounts
    from tfk8s.core.job import TrainingJob
    from tfk8s.launcher.kubernetes import run_kubernetes
    from tfk8s.launcher.kubernetes.settings import KubernetesSettings

    cfg = client.Configuration()
    cfg.host, cfg.ssl_ca_cert = spec["url"], spec["ca"]
    cfg.api_key = {"authorization": f"Bearer {spec['token']}"}
    api = client.ApiClient(cfg)
    counter = _Counter(api)
    n = spec["n"]
    job = TrainingJob(f"bench-{n}", ReplicaCounts(worker=n), ("python", "-m", "trainer.task"),
                      success_policy="AllWorkers", grace_period_s=0.0, stop_grace_s=0)
    settings = dataclasses.replace(
        KubernetesSettings.from_params(namespace=spec["namespace"], image="img:1", cpu="10m", memory="16Mi"),
        log_wait_s=0.5, cleanup_timeout_s=600)
    verdict_at: list[float] = []

    def sink(line: str) -> None:
        if not verdict_at and " succeeded in " in line and line.startswith("[launcher]"):
            verdict_at.append(time.monotonic())

    before = resource.getrusage(resource.RUSAGE_SELF)
    rss_start = _vm_rss_kib()
    t0 = time.monotonic()
    with one_by_one(spec["one_by_one"]):
        run_kubernetes(job, settings, api_client=api, log_sink=sink)
    done = time.monotonic()
    after = resource.getrusage(resource.RUSAGE_SELF)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return {"t0": t0, "done": done, "verdict_at": verdict_at, "calls": counter.since(0.0), "cpu_s": cpu,
            "rss_start_kib": rss_start, "peak_rss_kib": after.ru_maxrss}


def measure_control_plane(n: int, wait_s: float, nodes: int, sequential: bool = False) -> dict:
    """The same as :func:`measure` on the real control plane of ``tests/realcluster/controlplane.py`` (etcd, kube-apiserver,
    controller manager, scheduler, KWOK nodes) with the fake kubelet of ``tests/realcluster/fake_kubelet.py``; the launcher
    authenticates as the ``tfk8s-launcher`` ServiceAccount of ``manifests/rbac.yaml`` and runs in a process of
    its own (:func:`launcher_child`), whose CPU seconds and peak memory are also returned (``cpu_s``,
    ``rss_start_kib``, ``peak_rss_kib``). ``nodes`` is raised to hold every pod (110 pods a node).
    ``sequential``: the launcher creates and deletes one object at a time (:func:`one_by_one`)."""
    import json
    import signal
    import subprocess
    import tempfile
    import uuid

    from tests.realcluster.cluster_fixtures import RealCluster, add_node, node_name, wait
    from tests.realcluster.controlplane import free_port, running_control_plane
    from tests.realcluster.fake_kubelet import FakeKubelet

    nodes = max(nodes, -(-n // 100))
    out: dict = {}
    marks: dict[str, float] = {}
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
                c.job_name = f"bench-{n}"
                result = Path(work) / "launcher.json"
                spec = {"url": cp.url, "ca": str(cp.pki.path("ca.crt")), "token": c.token(),
                        "namespace": c.namespace, "n": n, "one_by_one": sequential, "result": str(result)}
                child = subprocess.Popen([sys.executable, __file__, "--child"], stdin=subprocess.PIPE, text=True)
                child.stdin.write(json.dumps(spec))
                child.stdin.close()

                def script() -> None:
                    c.wait_for(lambda: len(c.pods()) >= n, f"{n} pods", 600)
                    marks["pods"] = time.monotonic()
                    c.wait_for(lambda: all(c.running(p) for p in c.pods()), "every pod Running", 600)
                    time.sleep(wait_s)  # the launcher follows the coordinator's and up to 16 others' logs, then only watches
                    marks["wait"] = time.monotonic()
                    time.sleep(wait_s)
                    marks["wait_end"] = time.monotonic()
                    pods = c.pods()
                    for i, pod in enumerate(pods):
                        if i == len(pods) - 1:
                            out["last_status_at"] = time.monotonic()  # the final status is being written from here
                        kubelet.terminate(pod, 0)

                errors: list[BaseException] = []

                def play() -> None:
                    try:
                        script()
                    except BaseException as e:  # noqa: BLE001 - reported below
                        errors.append(e)
                        if child.poll() is None:
                            child.send_signal(signal.SIGTERM)  # the launcher's own stop: it cleans up

                thread = threading.Thread(target=play, daemon=True)
                thread.start()
                rc = child.wait()
                thread.join(30)
                if errors:
                    raise errors[0]
                if rc != 0:
                    raise RuntimeError(f"the launcher process exited {rc} (its output is above)")
                r = json.loads(result.read_text())
                c.close()
            finally:
                kubelet.stop()
    calls = [tuple(x) for x in r["calls"]]
    out.update(t0=r["t0"], cleanup_done_s=r["done"] - r["t0"], cpu_s=r["cpu_s"], rss_start_kib=r["rss_start_kib"],
               peak_rss_kib=r["peak_rss_kib"], nodes=nodes)
    # launch -> the last Job create sent (the Job controller then makes its pod)
    out["created_s"] = max(t for t, m, u in calls if m == "POST" and "/jobs" in u) - r["t0"]
    launch = [x for x in calls if x[0] <= marks["pods"] and not _is_watch_or_log(x[2])]
    out["launch_requests"] = len(launch)
    out["launch_per_replica"] = sum(1 for _, m, u in launch if _about_one(m, u))
    out["logs"] = sum(1 for t, _, u in calls if t <= marks["wait"] and u.split("?")[0].endswith("/log"))
    during = [x for x in calls if marks["wait"] <= x[0] <= marks["wait_end"]]
    out["wait_requests"] = sum(1 for _, _, u in during if not _is_watch_or_log(u))
    out["wait_watch_or_log"] = len(during) - out["wait_requests"]
    _end_times(out, r["verdict_at"])
    return out


def _cost_figures(n: int, r: dict, base: dict | None, note: str) -> list[Figure]:
    """The launcher process's own CPU seconds and memory for ``n`` replicas, and against the first size's
    scaled linearly (goal <= 1: neither grows faster than the replica count)."""
    mib = 1024.0
    growth = max(r["peak_rss_kib"] - r["rss_start_kib"], 0) / mib
    figures = [
        Figure(f"launcher_cpu_ms_per_replica_{n}", r["cpu_s"] * 1000, "cpu_ms", n, "replicas", "", "",
               usable_cores(), f"the launcher process's user+system CPU, launch to the end of the cleanup; {note}"),
        Figure(f"launcher_peak_rss_{n}", r["peak_rss_kib"] / mib, "peak_rss", r["rss_start_kib"] / mib,
               "rss_after_imports", "MiB", "", usable_cores(),
               f"the launcher process's peak resident set against its own after its imports; {note}"),
    ]
    if base is not None:
        scale = n / base["n"]
        base_growth = max(base["peak_rss_kib"] - base["rss_start_kib"], 0) / mib
        figures.append(Figure(f"launcher_cpu_vs_linear_{n}", r["cpu_s"], "cpu_s", base["cpu_s"] * scale,
                              f"linear_from_{base['n']}", "s", "<= 1", usable_cores(),
                              f"launcher CPU seconds for {n} replicas against {base['n']}'s times {scale:g}; {note}"))
        if base_growth >= 2:  # below that the base is noise (allocator arenas), not the replicas' share
            figures.append(Figure(
                f"launcher_memory_vs_linear_{n}", growth, "rss_growth", base_growth * scale,
                f"linear_from_{base['n']}", "MiB", "<= 1", usable_cores(),
                f"the launcher's peak memory above its imports for {n} replicas against {base['n']}'s "
                f"({base_growth:.1f} MiB) times {scale:g}; {note}"))
    return figures


def main(argv: list[str] | None = None) -> list[Figure]:
    if argv is None and sys.argv[1:] == ["--child"]:  # the launcher's own process (launcher_child)
        import json

        spec = json.loads(sys.stdin.read())
        Path(spec["result"]).write_text(json.dumps(launcher_child(spec)))
        return []
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--replicas", default="8,64,256,1024", help="comma-separated job sizes (the first is the base)")
    p.add_argument("--wait-s", type=float, default=2.0, help="seconds observed while every replica runs")
    p.add_argument("--backend", choices=("auto", "controlplane", "kmock"), default="auto",
                   help="auto: the real control plane when its binaries are built (make test-cluster), else kmock")
    p.add_argument("--nodes", type=int, default=4,
                   help="fake nodes of the control plane (64 CPUs, 110 pods each; raised to hold every pod)")
    p.add_argument("--no-one-by-one", action="store_true",
                   help="skip the one-by-one launcher of each size (its create/cleanup comparisons): the cost "
                        "figures alone, in half the time")
    common_args(p, reps=1)
    a = p.parse_args(argv)
    sizes = [int(x) for x in a.replicas.split(",")]
    if a.smoke:
        sizes, a.wait_s, a.backend = [2, 4], 0.5, "kmock"
    if a.backend == "auto":
        from tests.realcluster.controlplane import binaries_dir

        a.backend = "controlplane" if binaries_dir() is not None else "kmock"
    figures: list[Figure] = []
    base: tuple[int, float] | None = None
    base_cost: dict | None = None  # the first size's launcher CPU seconds and memory growth (control plane only)
    for n in sizes:
        if a.backend == "kmock":
            r = measure(n, a.wait_s)
            with one_by_one(True):
                seq = measure(n, a.wait_s)
        else:
            r = measure_control_plane(n, a.wait_s, a.nodes)
            print(f"  {n} replicas: {r}", file=sys.stderr, flush=True)
            seq = None if a.no_one_by_one else measure_control_plane(n, a.wait_s, a.nodes, sequential=True)
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
                   f"watch/log; {r['logs']} log streams followed live (the coordinator and at most 16 others; the rest "
                   f"read when they end); {note}"),
            Figure(f"launcher_verdict_s_{n}", r["verdict_s"], "verdict_after_last_status", 1.0, "goal", "s", "<= 1",
                   usable_cores(), f"cleanup done {r['cleanup_done_s']:.1f}s after launch; {note}"),
        ]
        if seq is not None:
            figures.append(Figure(f"launcher_cleanup_vs_one_by_one_{n}", r["cleanup_s"], "concurrent",
                                  seq["cleanup_s"], "one_by_one", "s", "<= 1", usable_cores(),
                                  f"verdict -> every Job, Service and pod of the {n} replicas deleted and gone, "
                                  f"side by side; {note}"))
            figures.append(Figure(f"launcher_create_vs_one_by_one_{n}", r["created_s"], "concurrent",
                                  seq["created_s"], "one_by_one", "s", "<= 1", usable_cores(),
                                  f"launch -> all {n} replicas' Jobs created, side by side; {note}"))
        if a.backend != "kmock":
            figures += _cost_figures(n, r, base_cost, note)
            base_cost = {"n": n, **r}  # each size against the one before it
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
