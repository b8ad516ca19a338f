"""Local backend: every replica a process on 127.0.0.1.

Used by the tests and by ``make run``; the same cluster-spec, TF_CONFIG, naming code as the Kubernetes backend
and the same decisions (:mod:`tfk8s.launcher.engine`: each poll turns the processes into views and carries out
:func:`~tfk8s.launcher.engine.decide`'s answer); only "start a replica, watch it, stop it" differs:

- start: ``subprocess.Popen`` in its own process group with TF_CONFIG and the contract's variables
  (:func:`tfk8s.core.contract.replica_env`) in its environment, its command's placeholders substituted, on a free
  port; ``NO_PROXY``/``no_proxy``/``no_grpc_proxy`` name the loopback (:func:`tfk8s.core.proxy.no_proxy_env`);
- watch: one thread per replica streams its merged stdout/stderr line by line with a ``[worker-1]`` prefix to
  the log sink (the launch step keeps each replica's log from those lines, :mod:`tfk8s.tracking.replica_logs`)
  and keeps the last lines and the exception for the error message (:class:`tfk8s.core.diagnosis.LogTail`);
  the main thread waits on exit codes;
- stop: SIGTERM to the replica's process group, SIGKILL after ``job.stop_grace_s`` (10 s by default:
  TensorFlow's preemption notifier swallows SIGTERM in some states, so the SIGKILL must follow soon; more for a
  program that checkpoints on SIGTERM);
- restart: the same policy and engine as on Kubernetes (:mod:`tfk8s.core.policy`, :mod:`tfk8s.launcher.engine`):
  a replica killed by a signal, exiting
  >= 128 or with the restart exit code (42), or hung (:mod:`tfk8s.launcher.watchdog`: no progress for
  ``job.progress_timeout_s``, no first step ``job.startup_timeout_s`` after it said it was starting), has its
  restart group (under MultiWorkerMirroredStrategy every chief and worker; under ParameterServerStrategy, for a
  ps, the chief and every ps) stopped and started again while ``max_restarts`` lasts (on the same ports, but
  for a restart of every replica, which gets new ones); the program resumes from its checkpoints (the
  trainer's BackupAndRestore);
- ports are the launcher's problem: :func:`free_ports` releases the ports it picked before the replicas bind
  them, so another process may take one in between. A replica that exits non-zero with a bind failure in its
  output (:data:`BIND_FAILURES`: ``Could not start gRPC server``, ``Address already in use``) before reporting
  any step restarts *every* replica on new ports (one cluster spec, which every member must agree on), not
  counted against ``max_restarts``, up to :data:`MAX_PORT_RETRIES` times;
- after success: lagging workers get ``job.grace_period_s``, the evaluator ``job.evaluator_grace_s`` to finish by
  itself (its final checkpoint), the ps none.

Every replica still running at the end (success, failure, timeout, SIGTERM or SIGINT of the launcher,
:mod:`tfk8s.launcher.stopping`) is stopped: a parameter server never exits by itself.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from tfk8s.core import policy
from tfk8s.core.cluster import Replica, ReplicaType, cluster_spec, tf_config_json
from tfk8s.core.contract import local_python
from tfk8s.core.diagnosis import LAST_LINES, LogTail
from tfk8s.core.errors import JobTimeoutError, ReplicaFailedError, RestartBudgetExhaustedError, stop_cause
from tfk8s.core.job import LaunchResult, TrainingJob
from tfk8s.core.proxy import LOCAL_HOSTS, no_proxy_env
from tfk8s.launcher import engine
from tfk8s.launcher.backends import DryRun
from tfk8s.launcher.gpu_noise import has_nvidia_gpu, without_cuda_noise
from tfk8s.launcher.stopping import StopState, stop_signals
from tfk8s.launcher.watchdog import ProgressWatch

LogSink = Callable[[str], None]
_POLL_S = 0.2
_TRAINERS = (ReplicaType.CHIEF, ReplicaType.WORKER)
LOCAL_GROUP_SETTLE_S = 2.0  # see run_local(group_settle_s)
BIND_FAILURES = ("Could not start gRPC server", "Address already in use", "Failed to add port to server")
"""Words of a TensorFlow server (or any program) that could not bind its port: a port taken between pick and bind."""
MAX_PORT_RETRIES = 5  # restarts on new ports after bind failures, not counted against max_restarts


def _print_sink(line: str) -> None:
    print(line, flush=True)


def free_ports(n: int, host: str = "127.0.0.1") -> list[int]:
    """Reserve ``n`` distinct free TCP ports on ``host`` (bound together, then released).

    There is a small window between release and the replica binding the port: a replica that then fails to
    bind is restarted with every other on new ports (:meth:`_LocalRun.wait`), not charged to the program.
    """
    socks = []
    try:
        for _ in range(n):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind((host, 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


@dataclass
class _Proc:
    """One attempt of one replica: its process, the tail of its output, its log reader."""

    replica: Replica
    popen: subprocess.Popen
    attempt: int = 0
    tail: LogTail = field(default_factory=lambda: LogTail(LAST_LINES))
    reader: threading.Thread | None = None
    stopping: bool = False  # stopped by the launcher: its exit is not a failure
    exit_code: int | None = None  # once seen
    failed_at: float | None = None  # monotonic seconds when its exit was first seen


def _stream(proc: _Proc, sink: LogSink, drop_cuda_noise: bool = False) -> None:
    lines = (raw.rstrip("\n") for raw in proc.popen.stdout)  # type: ignore[union-attr]
    for line in without_cuda_noise(lines) if drop_cuda_noise else lines:
        proc.tail.append(line)
        sink(f"[{proc.replica.label}] {line}")


def _stop(procs: list[_Proc], grace_s: float) -> None:
    """SIGTERM every live process group, then SIGKILL what is left after ``grace_s`` seconds."""
    live = [p for p in procs if p.popen.poll() is None]
    for p in live:
        p.stopping = True
        try:
            os.killpg(p.popen.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + grace_s
    for p in live:
        try:
            p.popen.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            try:
                os.killpg(p.popen.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            p.popen.wait()
    for p in procs:
        if p.reader:
            p.reader.join(timeout=5)


def _exit_reason(code: int, restart_exit_code: int = policy.DEFAULT_RESTART_EXIT_CODE) -> str:
    if policy.restart_requested(code, restart_exit_code):
        return policy.RESTART_REQUESTED
    if code < 0:
        try:
            return f"killed by signal {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    if code >= policy.RETRYABLE_EXIT_CODE_MIN:
        try:
            return f"Signal (exit code {code}: 128 + {signal.Signals(code - 128).name})"
        except ValueError:
            return "Signal"
    return "Error"


class _LocalRun:
    """One run of a training job as local processes: observe them (exits, progress), let the engine decide
    (:mod:`tfk8s.launcher.engine`), act (start, stop, restart)."""

    def __init__(self, job: TrainingJob, log_sink: LogSink, cwd: str | os.PathLike | None, stop_grace_s: float,
                 group_settle_s: float, stop: StopState):
        self.job, self.sink, self.cwd, self.stop = job, log_sink, cwd, stop
        self.stop_grace_s, self.group_settle_s = stop_grace_s, group_settle_s
        self.replicas = list(job.counts.replicas())
        self.spec = self._pick_ports()
        self.port_retries = 0  # restarts on new ports after a bind failure
        self.no_gpu = not has_nvidia_gpu()  # TensorFlow's CUDA lines are noise here (NO_GPU_NOISE)
        self.procs: dict[Replica, _Proc] = {}
        self.finished: list[_Proc] = []  # earlier attempts, for the final cleanup
        self.watches = {r: ProgressWatch.for_replica(
            job.train_dir, r.label, job.progress_timeout_s,
            startup_timeout_s=job.startup_timeout_s if r.replica_type in _TRAINERS else 0) for r in self.replicas}
        self.exit_codes: dict[str, int] = {}
        self.state = engine.EngineState.for_job(job, time.monotonic())  # restarts, success time, deadline

    def _pick_ports(self) -> Any:
        """A cluster spec on new free ports of 127.0.0.1 (every replica's TF_CONFIG is built from it)."""
        ports = dict(zip(self.replicas, free_ports(len(self.replicas)), strict=True))
        return cluster_spec(self.job.counts, lambda r: f"127.0.0.1:{ports[r]}")

    def _address(self, r: Replica) -> str:
        addresses = self.spec.get(r.replica_type.value) or []
        return addresses[r.index] if r.index < len(addresses) else "its port"

    def _bind_failed(self, p: _Proc) -> bool:
        """``p`` exited non-zero because its port was taken: a bind failure in its output, and no step reported
        in this attempt (a program that trained and then failed to bind something else is the program's)."""
        if p.exit_code in (None, 0) or self.watches[p.replica].stepped:
            return False
        return any(w in line for line in p.tail.lines() for w in BIND_FAILURES)

    def _rebind(self, failed: list[Replica]) -> None:
        """Stop every replica, pick new ports for all of them, start them again (attempt + 1), uncounted."""
        self.port_retries += 1
        was = ", ".join(f"{r.label} on {self._address(r)}" for r in failed)
        _stop(list(self.procs.values()), self.stop_grace_s)
        self.spec = self._pick_ports()
        self.sink(f"replica {was} could not bind its port (taken by another process between pick and bind): new "
                  f"ports for every replica, restarting all, not counted "
                  f"against max_restarts (port retry {self.port_retries} of {MAX_PORT_RETRIES})")
        for p in list(self.procs.values()):
            self.finished.append(p)
            self.exit_codes.pop(p.replica.label, None)
            self.launch(p.replica, p.attempt + 1)

    def all_procs(self) -> list[_Proc]:
        return [*self.finished, *self.procs.values()]

    def _env(self, replica: Replica) -> dict[str, str]:
        return {**os.environ, **self.job.env, **self.job.contract_env(replica),
                **no_proxy_env(LOCAL_HOSTS, os.environ, self.job.env),
                "TF_CONFIG": tf_config_json(self.spec, replica), "PYTHONUNBUFFERED": "1"}

    def launch(self, replica: Replica, attempt: int = 0) -> None:
        """Start ``replica``'s process (attempt ``attempt``) and its log reader (a stop signal waits until the
        process is known to the cleanup)."""
        self.watches[replica].new_attempt()
        argv = list(self.job.replica_command(replica))
        try:
            with self.stop.deferred():
                popen = subprocess.Popen(
                    argv, env=self._env(replica), cwd=self.cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL, text=True, bufsize=1, start_new_session=True,
                )
                proc = self.procs[replica] = _Proc(replica, popen, attempt)
        except OSError as e:  # no such program, not executable: the Kubernetes backend's StartError
            detail = (f"cannot run {argv[0]!r}: {e.strerror or e}; the command must name an existing program "
                      f"(on the PATH, or a path relative to {self.cwd or os.getcwd()}), e.g. python train.py")
            self.sink(f"[{replica.label}] tfk8s: StartError: {detail}")  # its kept log, which the error names
            raise ReplicaFailedError(replica, "StartError", detail=detail) from None
        proc.reader = threading.Thread(target=_stream, args=(proc, self.sink, self.no_gpu), daemon=True,
                                       name=f"log-{replica.label}")
        proc.reader.start()

    # -- observe -> decide -> act --------------------------------------------------------------------------------
    def wait(self) -> LaunchResult:
        """Poll the processes every :data:`_POLL_S` seconds, turn them into views, and carry out
        :func:`tfk8s.launcher.engine.decide`'s decision, until it is success or a failure."""
        while True:
            now = time.monotonic()
            views = self._views(now)
            if self.state.success_at is None and self.port_retries < MAX_PORT_RETRIES:
                taken = [r for r, p in self.procs.items() if self._bind_failed(p)]
                if taken:
                    self._rebind(taken)
                    continue
            decision = engine.decide(self.job, views, now, self.state, group_settle_s=self.group_settle_s)
            for note in decision.notes:
                self.sink(note)
            if isinstance(decision, engine.Succeeded):
                return LaunchResult(self.job.name, dict(self.exit_codes), [r.label for r in decision.stop],
                                    decision.seconds, self.state.restarts, self.spec)
            if isinstance(decision, engine.Restart):
                self._restart(decision)
                continue
            if isinstance(decision, engine.Fail):
                raise self._error(decision)
            if isinstance(decision, engine.TimedOut):
                raise JobTimeoutError(decision.message)
            time.sleep(_POLL_S)

    def _views(self, now: float) -> dict[Replica, engine.ReplicaView]:
        """Observe: each current process's exit (recorded and said once) or, while it runs, its progress."""
        views = {}
        for r, p in self.procs.items():
            code = p.popen.poll()
            if code is not None and p.exit_code is None:
                if p.reader:
                    p.reader.join(timeout=5)  # the last lines belong in the error message
                p.exit_code, p.failed_at = code, now
                self.exit_codes[r.label] = code
                if code == 0:
                    self.sink(f"replica {r.label} succeeded")
                elif self.state.success_at is not None:
                    self.sink(f"replica {r.label} exited {code} after the job succeeded; ignored")
            failure, said = None, ""
            if p.exit_code not in (None, 0):
                kind = policy.exit_code_kind(p.exit_code, self.job.restart_exit_code)
                assert kind is not None
                failure = policy.Failure(kind, _exit_reason(p.exit_code, self.job.restart_exit_code),
                                         exit_code=p.exit_code)
                said = f"replica {r.label} exited {p.exit_code} ({failure.reason})"
            elif code is None and self.state.success_at is None:
                stalled = self.watches[r].poll()
                if stalled is not None:
                    failure = policy.Failure(policy.FailureKind.RETRYABLE, policy.NO_PROGRESS,
                                             self.watches[r].describe(stalled))
                    said = f"replica {r.label} {failure.reason}: {failure.message}"
            views[r] = engine.ReplicaView(r, terminal=p.exit_code is not None, succeeded=p.exit_code == 0,
                                          failure=failure, finished_at=p.failed_at, said=said)
        return views

    def _restart(self, decision: engine.Restart) -> None:
        """Act: stop and start again the decision's group (its note said after they stopped: their last lines
        reach the kept logs before the separator)."""
        procs = [self.procs[r] for r in decision.group]
        _stop(procs, self.stop_grace_s)
        self.sink(decision.message)
        if set(decision.group) == set(self.replicas):  # every member restarts: new ports, one agreed spec
            self.spec = self._pick_ports()
        for p in procs:
            self.finished.append(p)
            self.exit_codes.pop(p.replica.label, None)
            self.launch(p.replica, p.attempt + 1)

    def _error(self, decision: engine.Fail) -> ReplicaFailedError:
        p, failure = self.procs[decision.replica], decision.failure
        if not decision.budget:
            return ReplicaFailedError(p.replica, failure.reason, exit_code=p.exit_code, last_lines=p.tail)
        if failure.reason == policy.NO_PROGRESS:
            _stop([p], self.stop_grace_s)  # hung: stopped before its failure is reported
        detail = f"{failure.message}; {decision.budget}" if failure.message else decision.budget
        return RestartBudgetExhaustedError(p.replica, failure.reason, exit_code=p.exit_code, last_lines=p.tail,
                                           detail=detail)


def run_local(job: TrainingJob, *, log_sink: LogSink = _print_sink, cwd: str | os.PathLike | None = None,
              stop_grace_s: float | None = None, group_settle_s: float = LOCAL_GROUP_SETTLE_S) -> LaunchResult:
    """Run ``job`` as local processes and wait until it succeeds or fails.

    Args:
        job: the training job; ``job.command`` is run for every replica with TF_CONFIG set (and the contract's
            variables, ``TFK8S_PROGRESS_FILE`` among them, when ``job.train_dir`` is set);
            ``job.progress_timeout_s`` and ``job.startup_timeout_s`` arm the progress watchdog
            (:mod:`tfk8s.launcher.watchdog`), ``job.max_restarts`` is the restart budget (retryable failures:
            exit code >= 128 or ``job.restart_exit_code``, killed by a signal, hung; :mod:`tfk8s.core.policy`).
        log_sink: receives every replica output line, prefixed ``[<type>-<index>]``, and the launcher's messages
            (a StartError as a line of its replica too, so the replica's kept log says it).
        cwd: working directory of the replicas (default: the launcher's).
        stop_grace_s: seconds between SIGTERM and SIGKILL when stopping replicas (None: ``job.stop_grace_s``).
        group_settle_s: seconds a permanent failure waits for the other members of its group still running
            (a retryable failure among them is the cause, and the group is recreated). Short locally: a
            process's exit is seen within a poll, unlike a kubelet's report.

    Returns:
        A :class:`LaunchResult`; ``stopped`` lists the replicas (ps, an evaluator still running
        ``job.evaluator_grace_s`` after success, lagging workers after ``job.grace_period_s``) the launcher
        stopped after success; ``restarts`` the recreations used.

    Raises:
        ReplicaFailedError: a replica exited with 1-127; names the replica, exit code, reason, the exception and
            its last log lines. A non-coordinator failing after success does not fail the job.
        RestartBudgetExhaustedError: a retryable failure (killed, exit >= 128 or the restart exit code,
            ``NoProgress``) with the budget used up.
        JobTimeoutError: ``job.timeout_s`` elapsed first.
        LauncherTerminatedError: the launcher got SIGTERM or SIGINT (after stopping every replica;
            :mod:`tfk8s.launcher.stopping`).
    """
    grace = job.stop_grace_s if stop_grace_s is None else stop_grace_s
    with stop_signals(job.name, log_sink) as stop:
        run = _LocalRun(job, log_sink, cwd, grace, group_settle_s, stop)
        log_sink(f"launching {job.name}: {job.counts.total} replicas, cluster spec {run.spec}")
        try:
            for replica in run.replicas:
                run.launch(replica)
            return run.wait()
        except BaseException:
            if stop.signum is not None:
                log_sink(f"the launcher {stop_cause(stop.signum)}: stopping every replica of {job.name}")
            raise
        finally:
            stop.cleaning = True  # a second signal now is noted, not obeyed: the replicas are stopped first
            _stop(run.all_procs(), grace)
            left = [p.replica.label for p in run.all_procs() if p.popen.poll() is None]
            if left:  # cannot happen after SIGKILL + wait; say so loudly if it ever does
                log_sink(f"WARNING: replicas still running after cleanup: {left}")


def python_command(module: str, *args: str) -> tuple[str, ...]:
    """``(sys.executable, "-m", module, *args)``: the local replicas run the launcher's own interpreter."""
    return (sys.executable, "-m", module, *args)


class LocalBackend:
    """The ``local`` backend of :mod:`tfk8s.launcher.backends` (launch, volume, inspection): :func:`run_local`;
    the launch step keeps each replica's log from the lines it streams (line by line, so ``tfk8s logs -f``
    follows a running job)."""

    name = "local"
    keeps_replica_logs = False
    local_paths = True
    has_cluster = False

    # -- launch ---------------------------------------------------------------------------------------------
    def options(self, kubernetes: Any, volume_root: str) -> None:
        """None: the local backend has no settings of its own (the replicas see the launcher's file system; the
        Kubernetes ones are checked with the other parameters, not used here)."""
        return

    def namespace(self, options: Any) -> str:
        return ""

    def program(self, argv: Sequence[str]) -> tuple[str, ...]:
        return local_python(argv)

    def dry_run(self, job: TrainingJob, options: Any) -> DryRun:
        """One document per process :func:`run_local` would start: ``replica``, ``command`` (placeholders
        substituted), ``env`` (the job's variables, the contract's, the loopback's NO_PROXY, TF_CONFIG; not the
        launcher's own environment, which every process inherits too) and ``cwd``; the ports are free ones
        picked now, as a run picks its own."""
        replicas = list(job.counts.replicas())
        ports = dict(zip(replicas, free_ports(len(replicas)), strict=True))
        spec = cluster_spec(job.counts, lambda r: f"127.0.0.1:{ports[r]}")
        docs = [{"replica": r.label, "command": list(job.replica_command(r)),
                 "env": {**job.env, **job.contract_env(r), **no_proxy_env(LOCAL_HOSTS, os.environ, job.env),
                         "TF_CONFIG": tf_config_json(spec, r), "PYTHONUNBUFFERED": "1"},
                 "cwd": os.getcwd()} for r in replicas]
        return DryRun(docs, [(f"{job.name}: {len(docs)} local processes on 127.0.0.1, cluster spec {spec}; the "
                             f"launcher's environment is inherited too; a run picks its own free ports")])

    def run(self, job: TrainingJob, log_sink: LogSink, options: Any) -> LaunchResult:
        return run_local(job, log_sink=log_sink)

    # -- volume ---------------------------------------------------------------------------------------------
    def ensure_volume(self, *, volume_root: str, pvc_name: str = "", namespace: str = "", create: bool = False,
                      size: str = "", storage_class: str = "", api_client: Any = None) -> dict[str, Any]:
        """The folder ``volume_root``, made (with its parents) when missing; the claim settings are unused.

        Raises:
            tfk8s.core.volume.VolumeWriteError: it cannot be made (the message names the folder and the fix).
        """
        from pathlib import Path

        from tfk8s.core.volume import volume_writes

        with volume_writes(volume_root, "the volume root"):
            Path(volume_root).mkdir(parents=True, exist_ok=True)
        return {}

    # -- inspection -----------------------------------------------------------------------------------------
    def connect(self, namespace: str) -> Any:
        raise ValueError("the local backend has no cluster to ask: its jobs are processes on their host")

    def live_jobs(self, api: Any) -> dict[str, dict[str, Any]]:
        return {}

    def launcher_lost(self, record: Mapping[str, Any]) -> bool:
        """The record says Running, its launcher ran on this host and that process is gone (killed before it
        could record the outcome; a zombie counts as gone)."""
        launcher = record.get("launcher") or {}
        return (record.get("state", "Running") == "Running" and launcher.get("host") == socket.gethostname()
                and bool(launcher.get("pid")) and not _pid_alive(int(launcher["pid"])))

    def stop(self, record: Mapping[str, Any], api: Any) -> None:
        """SIGTERM to the job's launcher, which stops every replica (:mod:`tfk8s.launcher.stopping`); a
        launcher already gone is fine.

        Raises:
            ValueError: the launcher runs on another host (the message names it: stop it there).
        """
        launcher = record.get("launcher") or {}
        if launcher.get("host") != socket.gethostname():
            raise ValueError(f"{record.get('name')} runs on host {launcher.get('host')}: run tfk8s delete there")
        try:
            os.kill(int(launcher["pid"]), signal.SIGTERM)
        except ProcessLookupError:
            pass

    def events(self, record: Mapping[str, Any], api: Any, warn: Callable[[str], None]) -> list[dict[str, Any]]:
        return []

    def logs(self, record: Mapping[str, Any], labels: Sequence[str], api: Any, *, follow: bool,
             say: Callable[[str], None], warn: Callable[[str], None]) -> bool:
        return False  # the volume's replica-logs/ is where a local replica's log is


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a zombie still answers kill(0)
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split()[2] != "Z"
    except (OSError, IndexError):
        return True


BACKEND = LocalBackend()
