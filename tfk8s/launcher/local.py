"""Local backend: every replica a process on 127.0.0.1.

Used by the tests and by ``make run``; the same cluster-spec, TF_CONFIG, naming and success-policy code as the
Kubernetes backend, only "start a replica, watch it, stop it" differs:

- start: ``subprocess.Popen`` in its own process group with TF_CONFIG and the contract's variables
  (:func:`tfk8s.contract.replica_env`) in its environment, its command's placeholders substituted, on a free
  port;
- watch: one thread per replica streams its merged stdout/stderr line by line with a ``[worker-1]`` prefix
  (and keeps the last lines for the error message); the main thread waits on exit codes;
- stop: SIGTERM to the replica's process group, SIGKILL after a grace period.

Every replica still running at the end (success, failure, timeout, KeyboardInterrupt or SIGTERM of the
launcher) is stopped: a parameter server never exits by itself.
"""

from __future__ import annotations

import collections
import contextlib
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from tfk8s.cluster import Replica, ReplicaType, cluster_spec, tf_config_json
from tfk8s.launcher import (
    JobTimeoutError,
    LauncherTerminatedError,
    LaunchResult,
    ReplicaFailedError,
    TrainingJob,
    is_success,
)

LogSink = Callable[[str], None]
LAST_LINES = 30
_POLL_S = 0.2


def _print_sink(line: str) -> None:
    print(line, flush=True)


def free_ports(n: int, host: str = "127.0.0.1") -> list[int]:
    """Reserve ``n`` distinct free TCP ports on ``host`` (bound together, then released).

    There is a small window between release and the replica binding the port; the launcher accepts it,
    as every local multi-process TF test does.
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
    replica: Replica
    popen: subprocess.Popen
    tail: collections.deque = field(default_factory=lambda: collections.deque(maxlen=LAST_LINES))
    reader: threading.Thread | None = None


class _Terminated(Exception):
    """SIGTERM reached the launcher."""


@contextmanager
def _sigterm_raises() -> Iterator[None]:
    """Turn SIGTERM into an exception while the launcher waits, so its cleanup runs (main thread only)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum, frame):
        raise _Terminated()

    previous = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _stream(proc: _Proc, sink: LogSink, log_file: Path | None) -> None:
    out = open(log_file, "a", encoding="utf-8") if log_file else None  # noqa: SIM115
    try:
        for raw in proc.popen.stdout:  # type: ignore[union-attr]
            line = raw.rstrip("\n")
            proc.tail.append(line)
            sink(f"[{proc.replica.label}] {line}")
            if out:
                out.write(line + "\n")
    finally:
        if out:
            out.close()


def _stop(procs: list[_Proc], grace_s: float) -> None:
    """SIGTERM every live process group, then SIGKILL what is left after ``grace_s`` seconds."""
    live = [p for p in procs if p.popen.poll() is None]
    for p in live:
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


def _exit_reason(code: int) -> str:
    if code < 0:
        try:
            return f"killed by signal {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return "Error"


def run_local(job: TrainingJob, *, log_sink: LogSink = _print_sink, log_dir: str | os.PathLike | None = None,
              cwd: str | os.PathLike | None = None, stop_grace_s: float = 10.0) -> LaunchResult:
    """Run ``job`` as local processes and wait until it succeeds or fails.

    Args:
        job: the training job; ``job.command`` is run for every replica with TF_CONFIG set.
        log_sink: receives every replica output line, prefixed ``[<type>-<index>]``.
        log_dir: if set, each replica's output is also written to ``<log_dir>/<type>-<index>.log``.
        cwd: working directory of the replicas (default: the launcher's).
        stop_grace_s: seconds between SIGTERM and SIGKILL when stopping replicas.

    Returns:
        A :class:`LaunchResult`; ``stopped`` lists the replicas (ps, evaluator, lagging workers after
        ``job.grace_period_s``) the launcher stopped after success.

    Raises:
        ReplicaFailedError: a replica exited non-zero (or was killed); names the replica, exit code, reason
            and its last log lines. A non-coordinator failing after success does not fail the job.
        JobTimeoutError: ``job.timeout_s`` elapsed first.
        LauncherTerminatedError: the launcher got SIGTERM (after stopping every replica).
        KeyboardInterrupt: the launcher was interrupted (after stopping every replica).
    """
    replicas = list(job.counts.replicas())
    ports = dict(zip(replicas, free_ports(len(replicas)), strict=True))
    spec = cluster_spec(job.counts, lambda r: f"127.0.0.1:{ports[r]}")
    if log_dir:
        Path(log_dir).mkdir(parents=True, exist_ok=True)
    procs: list[_Proc] = []
    start = time.monotonic()
    log_sink(f"launching {job.name}: {job.counts.total} replicas, cluster spec {spec}")
    try:
        with _sigterm_raises():
            for replica in replicas:
                env = {**os.environ, **job.env, **job.contract_env(replica),
                       "TF_CONFIG": tf_config_json(spec, replica), "PYTHONUNBUFFERED": "1"}
                popen = subprocess.Popen(
                    list(job.replica_command(replica)), env=env, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL, text=True, bufsize=1, start_new_session=True,
                )
                proc = _Proc(replica, popen)
                log_file = Path(log_dir) / f"{replica.label}.log" if log_dir else None
                proc.reader = threading.Thread(target=_stream, args=(proc, log_sink, log_file), daemon=True,
                                               name=f"log-{replica.label}")
                proc.reader.start()
                procs.append(proc)
            result = _wait(job, procs, start, log_sink)
            result.cluster_spec = spec
            return result
    except _Terminated:
        log_sink(f"launcher got SIGTERM: stopping every replica of {job.name}")
        raise LauncherTerminatedError(
            f"the launcher got SIGTERM (run cancelled or pod evicted); every replica of {job.name} was stopped"
        ) from None
    finally:
        _stop(procs, stop_grace_s)
        left = [p.replica.label for p in procs if p.popen.poll() is None]
        if left:  # cannot happen after SIGKILL + wait; say so loudly if it ever does
            log_sink(f"WARNING: replicas still running after cleanup: {left}")


def _wait(job: TrainingJob, procs: list[_Proc], start: float, log_sink: LogSink) -> LaunchResult:
    succeeded: set[Replica] = set()
    exit_codes: dict[str, int] = {}
    success_at: float | None = None
    counted = (ReplicaType.CHIEF, ReplicaType.WORKER)
    while True:
        for p in procs:
            code = p.popen.poll()
            if code is None or p.replica.label in exit_codes:
                continue
            if p.reader:
                p.reader.join(timeout=5)  # the last lines belong in the error message
            exit_codes[p.replica.label] = code
            if code == 0:
                succeeded.add(p.replica)
                log_sink(f"replica {p.replica.label} succeeded")
            elif success_at is None:
                raise ReplicaFailedError(p.replica, _exit_reason(code), exit_code=code, last_lines=p.tail)
            else:
                log_sink(f"replica {p.replica.label} exited {code} after the job succeeded; ignored")
        now = time.monotonic()
        if success_at is None and is_success(job.success_policy, job.counts, succeeded):
            success_at = now
            log_sink(f"{job.name} succeeded in {now - start:.1f}s")
        if success_at is not None:
            lagging = [p for p in procs if p.popen.poll() is None and p.replica.replica_type in counted]
            if not lagging or now - success_at >= job.grace_period_s:
                stopped = [p.replica.label for p in procs if p.popen.poll() is None]
                if stopped:
                    log_sink(f"stopping remaining replicas: {', '.join(stopped)}")
                return LaunchResult(job.name, exit_codes, stopped, success_at - start)
        if job.timeout_s is not None and now - start > job.timeout_s:
            raise JobTimeoutError(
                f"{job.name} did not finish within its timeout of {job.timeout_s:.0f}s; "
                f"raise the timeout or lower epochs. Replicas still running: "
                f"{[p.replica.label for p in procs if p.popen.poll() is None]}"
            )
        time.sleep(_POLL_S)


def python_command(module: str, *args: str) -> tuple[str, ...]:
    """``(sys.executable, "-m", module, *args)``: the local replicas run the launcher's own interpreter."""
    return (sys.executable, "-m", module, *args)


@contextmanager
def sigterm_reaches_children(grace_s: float = 30.0, log_sink: LogSink = _print_sink) -> Iterator[None]:
    """While inside, SIGTERM to this process is forwarded to all its descendant processes, which get
    ``grace_s`` seconds to exit (then SIGKILL); then this process exits with status 143 (128 + SIGTERM).

    For ``pipelines/train.py --local``: ``kfp.local`` runs each step as a child process, and the launch step
    stops its replicas on SIGTERM (:func:`run_local`), but only if the signal reaches it. Main thread only;
    elsewhere this does nothing.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    import psutil

    def handler(signum, frame):
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        children = psutil.Process().children(recursive=True)
        log_sink(f"got SIGTERM: stopping {len(children)} child processes (the launch step stops its replicas)")
        for child in children:
            with contextlib.suppress(psutil.Error):
                child.terminate()
        _, alive = psutil.wait_procs(children, timeout=grace_s)
        for child in alive:
            with contextlib.suppress(psutil.Error):
                child.kill()
        raise SystemExit(128 + signal.SIGTERM)

    previous = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
