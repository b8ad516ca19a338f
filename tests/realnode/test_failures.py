"""Failures on real pods (``make test-e2e``; fixtures :mod:`tests.realnode.e2e_pods`), the launch step in a pod as under
KFP or Argo: a worker's process SIGKILLed inside its container and a worker's pod deleted (the MWMS group is
recreated and resumes from the checkpoint on the volume, saying which epoch); a memory limit too small (real
OOM kills until the budget is spent); an image nothing can be pulled from (the kubelet's own message, at once);
the launcher's pod deleted mid-training, and a launcher SIGKILLed whose pod is then deleted (the garbage
collector alone removes its replicas by their ownerReferences).
"""

from __future__ import annotations

import re
import threading
import time

import pytest

pytest.register_assert_rewrite("tests.realnode.e2e_fixtures", "tests.realnode.e2e_pods")

from tests.realnode.e2e_fixtures import E2E
from tests.realnode.e2e_pods import ProjectPods, small_job, unique, wait_for

pytest_plugins = ["tests.realnode.e2e_fixtures", "tests.realnode.e2e_pods"]
pytestmark = [pytest.mark.e2e, pytest.mark.timeout(600)]

# After the first epoch (~11 s: tracing) an epoch takes ~1 s here: enough epochs that the group is disrupted
# mid-training. A deleted MWMS worker trains on through its grace period (10 s; see the pod-deletion test).
KILL_EPOCHS, DELETE_EPOCHS = 8, 30
# `kubectl exec POD -- sh -c KILL`: SIGKILL the trainer's process by its command line (the pattern is built at
# run time so that this shell's own command line, and its subshells', do not match it).
KILL = """want=trainer; want="$want.task"
for d in /proc/[0-9]*; do
  pid=${d#/proc/}; [ "$pid" = "$$" ] && continue
  cmd=$(tr '\\0' ' ' < "$d/cmdline" 2>/dev/null) || continue
  case "$cmd" in *"$want"*) kill -9 "$pid" && echo "killed $pid: $cmd" ;; esac
done"""


# worker-1's SIGKILL recreates the worker set, one restart of the budget (tfk8s.core.policy.restart_note); worker-0,
# whose all-reduce peer vanished, may be seen failing too before the decision
RESTARTED_AFTER_SIGKILL = (r"\[launcher\] worker-1 failed with exit code 137: Signal \(killed by SIGKILL\)"
                           r"( \(then worker-0 failed too\))?; retryable: recreating worker-0, worker-1 "
                           r"\(restart 1 of max_restarts=2\)")
# a deleted worker's pod: the kubelet's SIGTERM makes every trainer save at one step and exit 42 (the restart exit
# code), which recreates the worker set, one restart of the budget
RESTARTED_AFTER_SIGTERM = (r"\[launcher\] worker-[01] failed with exit code 42: RestartRequested[^\n]*; retryable: "
                           r"recreating worker-0, worker-1 \(restart 1 of max_restarts=2\)")

def _epochs(log: str, epochs: int) -> list[int]:
    """The epochs whose end the trainer printed in ``log`` (``epoch k/N: loss=...``)."""
    return [int(e) for e in re.findall(rf"^epoch (\d+)/{epochs}: loss=", log, re.MULTILINE)]


def _start_and_wait_for_epoch_1(p: ProjectPods, run: str, epochs: int) -> tuple[str, str, dict]:
    """Launch 2 MWMS workers for ``epochs`` epochs; wait until worker-1 has finished its first one (its line
    comes after BackupAndRestore's save: the trainer's callbacks run in that order); (launcher pod, job,
    worker-1's pod)."""
    launcher = p.launch(run, "--workers", "2", *small_job(epochs=epochs, max_restarts=2))
    job = p.job_of(run)
    wait_for(lambda: _epochs(p.replica_log(run, "worker-1"), epochs), "worker-1's first epoch", 300,
             explain=lambda: p.tail(launcher))
    pod = p.replica_pod(job, "worker-1", attempt=0)
    assert pod is not None and pod["status"]["phase"] == "Running", pod
    return launcher, job, pod


def _assert_resumed(p: ProjectPods, run: str, launcher: str, epochs: int) -> tuple[str, int]:
    """The job succeeded after one group restart, whose replicas resumed where the first attempt left off and
    trained each later epoch once; (the launcher's log, epochs done before the restart).

    Two ways to resume (tfk8s.runtime.keras_callbacks.Resume): after a SIGKILL, from the backup of the last epoch
    that ended (``resumed from epoch k of N``: the second attempt trains k+1..N); after a SIGTERM, which every
    trainer answers by saving at one step and exiting 42, in the epoch it stopped in (``resumed in epoch e of N
    at step s of M (saved on SIGTERM; ...)``: e-1 epochs were done, the second attempt ends e..N)."""
    pod = p.wait_done(launcher, 300)
    log = p.e2e.log(launcher)
    assert pod["status"]["phase"] == "Succeeded", log[-5000:]
    kept = p.replica_log(run, "worker-1")  # both attempts, on the volume
    first, _, second = kept.partition("----- tfk8s")
    done = _epochs(first, epochs)
    assert second and done == list(range(1, len(done) + 1)) and 1 <= len(done) < epochs, kept[-3000:]
    pattern = (rf"^\[{{label}}\] resumed (from|in) epoch (\d+) of {epochs}"
               rf"(?: at step \d+ of \d+ \(saved on SIGTERM;| \(backup in )")
    resumed = {label: re.findall(pattern.format(label=label), log, re.MULTILINE)
               for label in ("worker-0", "worker-1")}
    ((how, at),) = set(resumed["worker-0"] + resumed["worker-1"])
    k = int(at) if how == "from" else int(at) - 1  # the epochs done before the restart
    # k: the epochs whose line came before the disruption (one more when it fell between the backup's save
    # and the line); the second attempt trains the rest, none twice
    assert k in (len(done), len(done) + 1), (done, resumed)
    assert f"resumed {how} epoch {at} of {epochs}" in second
    assert _epochs(second, epochs) == list(range(k + 1, epochs + 1)), second[-3000:]
    return log, k


def test_kill_9_of_a_worker_process_recreates_the_group_which_resumes_from_the_checkpoint(e2e_pods: ProjectPods):
    """``kubectl exec`` (``pods/exec``: the API server, the kubelet, containerd's streaming server) of ``kill -9``
    inside worker-1's container. The trainer is not its PID namespace's init (``shareProcessNamespace``: the
    pause container is), so the SIGKILL from inside the container reaches it."""
    p = e2e_pods
    run = unique("kill9")
    launcher, job, pod = _start_and_wait_for_epoch_1(p, run, KILL_EPOCHS)
    out = p.exec(pod["metadata"]["name"], ["sh", "-c", KILL], container="tensorflow")
    assert re.match(r"killed \d+: python -m trainer\.task ", out), out
    assert not out.startswith("killed 1:")  # not PID 1: the pause container is
    log, _ = _assert_resumed(p, run, launcher, KILL_EPOCHS)
    assert re.search(RESTARTED_AFTER_SIGKILL, log), log[-5000:]
    assert p.job_objects(job) == {}


def test_deleting_a_worker_pod_recreates_the_group_which_resumes_from_the_checkpoint(e2e_pods: ProjectPods):
    """The pod deleted with its grace period (10 s). The kubelet's SIGTERM reaches the trainer (it is not PID 1):
    every worker saves the backup at one step and exits 42 within seconds (before issue 25 TensorFlow's
    preemption notifier swallowed it and the pod ran on to the SIGKILL, 137); the group is recreated and resumes
    in the epoch it stopped in."""
    p = e2e_pods
    run = unique("delete")
    launcher, job, pod = _start_and_wait_for_epoch_1(p, run, DELETE_EPOCHS)
    name = pod["metadata"]["name"]
    seen: list[tuple] = []
    watcher = _watch_pod(p, name, seen)
    t0 = time.monotonic()
    p.core.delete_namespaced_pod(name, p.namespace)
    wait_for(lambda: p.replica_pod(job, "worker-1", attempt=1), "worker-1's second attempt", 120,
             explain=lambda: p.tail(launcher) + f"\nevents of {name}: {p.events(name)}")
    log, _ = _assert_resumed(p, run, launcher, DELETE_EPOCHS)
    assert re.search(RESTARTED_AFTER_SIGTERM, log), log[-5000:]
    events = p.events(name)
    assert ("Normal", "Killing", "Stopping container tensorflow") in events, events
    # a real node with a deleted running pod: marked for deletion while still Running, Failed once the program
    # ends (here its own exit 42, well within the 10 s grace period), then gone
    watcher.join(30)
    order = [state for i, state in enumerate(seen) if i == 0 or state[:3] != seen[i - 1][:3]]
    assert [s[:3] for s in order][-3:] == [("MODIFIED", "Running", True), ("MODIFIED", "Failed", True),
                                           ("DELETED", "Failed", True)], order
    marked = next(state[4] for state in order if state[2])
    assert order[-1][3] == 42 and order[-2][4] - marked < 9, order
    assert time.monotonic() - t0 < 240
    assert p.job_objects(job) == {}


def _watch_pod(p: ProjectPods, name: str, into: list[tuple]) -> threading.Thread:
    """Record every watch event of pod ``name`` as (type, phase, being deleted, exit code, seconds) until it
    is DELETED."""
    from kubernetes import watch

    def run() -> None:
        w = watch.Watch()
        for event in w.stream(p.core.list_namespaced_pod, p.namespace, field_selector=f"metadata.name={name}",
                              timeout_seconds=120):
            pod = event["raw_object"]
            code = E2E.terminated(pod).get("exitCode")
            into.append((event["type"], pod["status"].get("phase"), bool(pod["metadata"].get("deletionTimestamp")),
                         code, time.monotonic()))
            if event["type"] == "DELETED":
                w.stop()

    t = threading.Thread(target=run, daemon=True)
    t.start()
    time.sleep(0.5)  # the watch is open before the delete
    return t


def test_a_memory_limit_too_small_is_oom_killed_retried_and_fails_naming_oomkilled_and_the_limit(
        e2e_pods: ProjectPods):
    p = e2e_pods
    run = unique("oom")
    launcher = p.launch(run, "--workers", "1", *small_job(memory="200Mi", max_restarts=1))
    pod = p.wait_done(launcher, 240)
    log = p.e2e.log(launcher)
    assert pod["status"]["phase"] == "Failed", log[-5000:]
    assert E2E.terminated(pod)["exitCode"] == 1
    assert "[launcher] worker-0 failed with exit code 137: OOMKilled (the container exceeded its memory limit); " \
           "retryable: recreating worker-0 (restart 1 of max_restarts=1)" in log
    assert "launch_training: error: replica worker-0 failed with exit code 137: OOMKilled (the container exceeded " \
           "its memory limit; worker-0 ran out of its memory limit 200Mi after 1 restarts: raise memory" in log
    # the kubelet's own events of the replica's pods, printed by the launcher
    for reason in ("Pulled", "Created", "Started"):
        assert re.search(rf"\[launcher\] event Normal {reason} Pod/{p.job_of(run)}-worker-0-", log), log[-4000:]
    assert p.job_objects(p.job_of(run)) == {}


def test_an_image_nothing_can_be_pulled_from_fails_at_once_with_the_kubelets_message(e2e_pods: ProjectPods):
    """A registry on a closed port of this machine (nothing leaves it): the kubelet's ErrImagePull within
    seconds, not the schedule deadline (600 s)."""
    p = e2e_pods
    run = unique("noimage")
    image = "127.0.0.1:1/tfk8s/missing:0.1.0"
    t0 = time.monotonic()
    launcher = p.launch(run, "--workers", "1", "--image", image, *small_job())
    pod = p.wait_done(launcher, 120)
    elapsed = time.monotonic() - t0
    log = p.e2e.log(launcher)
    assert pod["status"]["phase"] == "Failed", log[-5000:]
    assert re.search(r"launch_training: error: replica worker-0 failed: (ErrImagePull|ImagePullBackOff) "
                     rf'\(failed to pull and unpack image "{re.escape(image)}": .*dial tcp 127\.0\.0\.1:1: connect: '
                     r"connection refused", log), log[-4000:]
    assert re.search(r"\[launcher\] event Warning Failed Pod/\S+: Failed to pull image", log), log[-4000:]
    assert elapsed < 60, f"{elapsed:.0f}s"
    assert p.job_objects(p.job_of(run)) == {}


def _follow(p: ProjectPods, pod: str, into: list[str]) -> threading.Thread:
    """Follow pod ``pod``'s log into ``into`` in a thread (its log goes with the pod)."""
    def run() -> None:
        from contextlib import suppress

        with suppress(Exception):
            resp = p.core.read_namespaced_pod_log(pod, p.namespace, follow=True, _preload_content=False)
            for chunk in resp.stream(4096):
                into.append(chunk.decode(errors="replace"))

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t


def _owned_and_running(p: ProjectPods, run: str) -> tuple[str, str, dict]:
    """Launch 2 MWMS workers for many epochs, wait until both train, check every object is owned by the
    launcher's pod; (launcher pod, job, the launcher's pod JSON)."""
    launcher = p.launch(run, "--workers", "2", *small_job(epochs=100))
    job = p.job_of(run)
    wait_for(lambda: _epochs_done_any(p.replica_log(run, "worker-1")), "worker-1 training", 300)
    owner = p.e2e.pod(launcher)
    uid = owner["metadata"]["uid"]
    objects = p.job_objects(job)
    assert set(objects) == {"pods", "jobs", "services", "networkpolicies"}, objects
    refs = [p.batch.read_namespaced_job(n, p.namespace).metadata.owner_references for n in objects["jobs"]]
    refs += [p.core.read_namespaced_service(n, p.namespace).metadata.owner_references for n in objects["services"]]
    refs += [p.networking.read_namespaced_network_policy(n, p.namespace).metadata.owner_references
             for n in objects["networkpolicies"]]
    assert all([(r.kind, r.name, r.uid) for r in rs] == [("Pod", launcher, uid)] for rs in refs), refs
    return launcher, job, owner


def _epochs_done_any(log: str) -> bool:
    return bool(re.search(r"^epoch 1/\d+: loss=", log, re.MULTILINE))


def test_deleting_the_launcher_pod_mid_training_stops_and_removes_every_replica(e2e_pods: ProjectPods):
    """What deleting (or cancelling) the pipeline run does: the launcher pod gets SIGTERM, deletes its job and
    is gone within its grace period (30 s); the ownerReferences would collect whatever it left."""
    p = e2e_pods
    run = unique("cancel")
    launcher, job, _ = _owned_and_running(p, run)
    out: list[str] = []
    follower = _follow(p, launcher, out)
    t0 = time.monotonic()
    p.core.delete_namespaced_pod(launcher, p.namespace)
    wait_for(lambda: p.job_objects(job) == {} or None, "every object of the job gone", 45)
    gone = time.monotonic() - t0
    follower.join(30)
    log = "".join(out)
    assert "the launcher got SIGTERM (the run was cancelled, or its pod evicted); every replica of " \
           f"{job} is being deleted" in log, log[-3000:]
    assert f"[launcher] deleted the Jobs, Services and pods of {job}; none remain" in log, log[-3000:]
    assert gone < 30, f"the job's objects took {gone:.1f}s to go"


def test_a_killed_launchers_replicas_are_garbage_collected_once_its_pod_is_deleted(e2e_pods: ProjectPods):
    """The launcher SIGKILLed (from the node, by its container: an OOM kill or a node failure would do the
    same) runs no cleanup; its replicas train on. Deleting its pod (Argo's pod GC, the run's deletion) lets
    Kubernetes' garbage collector delete them by their ownerReferences alone."""
    p = e2e_pods
    run = unique("orphan")
    launcher, job, owner = _owned_and_running(p, run)
    cid = owner["status"]["containerStatuses"][0]["containerID"].split("://", 1)[1]
    p.e2e.cluster.node.ctr("tasks", "kill", "--signal", "SIGKILL", cid)
    dead = p.wait_done(launcher, 60)
    assert (dead["status"]["phase"], E2E.terminated(dead)["exitCode"]) == ("Failed", 137)
    time.sleep(3)
    assert len(p.pods_of(job)) == 2 and all(x["status"]["phase"] == "Running" for x in p.pods_of(job))
    t0 = time.monotonic()
    p.core.delete_namespaced_pod(launcher, p.namespace)
    wait_for(lambda: p.job_objects(job) == {} or None, "the garbage collector deleting the job's objects", 90)
    assert time.monotonic() - t0 < 60

