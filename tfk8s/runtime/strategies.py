"""The ``tf.distribute`` strategy TF_CONFIG calls for: the default one, MultiWorkerMirroredStrategy, or
ParameterServerStrategy (a ps or PSS worker serves instead); waiting for the peers first, and the thread pools
of a process that shares its host with its peers."""

from __future__ import annotations

import os
import select
import socket
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, NoReturn

from tfk8s.core.cluster import Replica, ReplicaType, Strategy
from tfk8s.core.progress import ProgressReporter
from tfk8s.runtime.replica import _STATE, Context, context, reporter

if TYPE_CHECKING:
    import tensorflow as tf

DEFAULT_PEER_TIMEOUT_S = 300.0  # how long strategy() waits for the peers' ports before giving up
PEER_MESSAGE_INTERVAL_S = 5.0  # how often strategy() says which peers it still waits for
PEER_POLL_S = 0.5  # how often wait_for_peers tries the peers it still waits for (sooner when one connects)
PEER_WAKE_WINDOW_S = 1.0  # after a peer connected: try again every PEER_WAKE_POLL_S for this long
PEER_WAKE_POLL_S = 0.05
PEER_WAKE_MAX_PENDING = 8  # ... when at most this many peers are still missing (bounds the connects and lookups)
PSS_MIN_INTER_OP_THREADS = 2  # a ps/worker server with one inter-op thread deadlocks on the first step (TF 2.21)
COMMUNICATIONS = ("AUTO", "RING", "NCCL")


class PeerTimeoutError(RuntimeError):
    """Peers did not accept connections within the bound; the message names them and what to check."""


def default_threads(ctx: Context) -> tuple[int, int]:
    """``(intra-op, inter-op)`` threads for this process: 0 (TensorFlow's default: every core) unless the whole
    cluster runs on this host (every address on 127.0.0.1/localhost, the local backend), then the usable cores
    divided among its processes; inter-op at least :data:`PSS_MIN_INTER_OP_THREADS` under
    ParameterServerStrategy (one thread deadlocks a ps/worker server)."""
    addrs = [a for kind in ("chief", "worker", "ps") for a in ctx.cluster.get(kind, [])]
    hosts = {a.rsplit(":", 1)[0] for a in addrs}
    threads = 0
    if len(addrs) > 1 and hosts <= {"127.0.0.1", "localhost"}:
        try:
            cores = len(os.sched_getaffinity(0))
        except AttributeError:  # not Linux
            cores = os.cpu_count() or 1
        threads = max(1, cores // len(addrs))
    inter = threads
    if ctx.strategy_kind is Strategy.PARAMETER_SERVER and inter == 1:
        inter = PSS_MIN_INTER_OP_THREADS
    return threads, inter


def _peers(ctx: Context, kinds: tuple[str, ...]) -> dict[str, str]:
    return {Replica(ReplicaType(kind), i).label: addr for kind in kinds for i, addr in enumerate(ctx.cluster.get(kind, []))
            if (kind, i) != (ctx.replica_type, ctx.replica_index)}


def wait_for_peers(peers: Mapping[str, str], timeout_s: float = DEFAULT_PEER_TIMEOUT_S, *,
                   listen_port: int | None = None, interval_s: float = PEER_MESSAGE_INTERVAL_S,
                   reporter: ProgressReporter | None = None, poll_s: float = PEER_POLL_S) -> float:
    """Wait until every peer (label -> ``host:port``) accepts TCP connections; returns the seconds waited.

    It tries the missing peers every ``poll_s`` seconds, and every ``interval_s`` seconds it prints which peers
    it still waits for (and refreshes ``reporter``'s ``starting`` heartbeat). With ``listen_port`` it listens
    on that port meanwhile, so that peers doing the same see this replica: MultiWorkerMirroredStrategy's
    constructor blocks, holding the GIL, until every worker has joined, so the waiting must happen before it,
    when no TensorFlow server listens yet. A peer's connection to that port (its own wait finding this replica)
    wakes the wait at once to try the missing peers again, and then every :data:`PEER_WAKE_POLL_S` for
    :data:`PEER_WAKE_WINDOW_S` (when at most :data:`PEER_WAKE_MAX_PENDING` peers are missing), instead of
    every ``poll_s``: the last replica to start connects to every other and goes on at once, closing its
    listener, and its TensorFlow server takes the port a moment later, so the others find it within about
    50 ms of that rather than up to ``poll_s`` later (issue 26; the connection is accepted and closed: the
    peer's connect had already succeeded).

    Raises:
        PeerTimeoutError: some peer did not answer within ``timeout_s`` seconds (the message names it).
    """
    listener = None
    if listen_port is not None:
        try:
            listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            listener.bind(("", listen_port))
            listener.listen(64)
        except OSError as e:  # e.g. already bound: peers will see the real server instead
            print(f"tfk8s.runtime: cannot listen on port {listen_port} while waiting for peers ({e})", flush=True)
            listener.close()
            listener = None
    t0 = time.monotonic()
    next_message = t0 + interval_s
    fast_until = 0.0  # monotonic time until which a peer's connection makes it poll every PEER_WAKE_POLL_S
    pending = dict(peers)
    try:
        while pending:
            for label, addr in list(pending.items()):
                host, port = addr.rsplit(":", 1)
                try:
                    socket.create_connection((host, int(port)), timeout=1).close()
                    del pending[label]
                except OSError:
                    pass
            now = time.monotonic()
            if not pending:
                break
            waited = now - t0
            if waited > timeout_s:
                names = ", ".join(f"{k} at {v}" for k, v in pending.items())
                raise PeerTimeoutError(
                    f"gave up after {timeout_s:.0f}s waiting for {names}: never accepted connections. Check that "
                    "the replica runs (its log; on Kubernetes `kubectl get pods`) and that its address resolves; "
                    "raise the bound with runtime.strategy(peer_timeout_s=...) (trainer: --peer-timeout-s)")
            if now >= next_message:
                print(f"waiting for peers: {', '.join(f'{k} ({v})' for k, v in pending.items())} "
                      f"({waited:.0f}s of at most {timeout_s:.0f}s)", flush=True)
                if reporter is not None:
                    reporter.update("starting", force=True)
                next_message = now + interval_s
            fast = now < fast_until and len(pending) <= PEER_WAKE_MAX_PENDING
            if _sleep_or_wake(listener, min(poll_s, PEER_WAKE_POLL_S) if fast else poll_s):
                fast_until = time.monotonic() + PEER_WAKE_WINDOW_S
    finally:
        if listener is not None:
            listener.close()
    return time.monotonic() - t0


def _sleep_or_wake(listener: socket.socket | None, seconds: float) -> bool:
    """Sleep ``seconds``, or less: until a peer connects to ``listener`` (accepted and closed at once); True
    when one did."""
    if listener is None:
        time.sleep(seconds)
        return False
    ready, _, _ = select.select([listener], [], [], seconds)
    if ready:
        listener.setblocking(False)
        try:
            while True:  # every connection queued so far, so that the next select waits again
                conn, _ = listener.accept()
                conn.close()
        except OSError:  # BlockingIOError: none left
            pass
        finally:
            listener.setblocking(True)
    return bool(ready)


def strategy(*, communication: str = "AUTO", bytes_per_pack: int = 0, collective_timeout_s: float | None = None,
             peer_timeout_s: float = DEFAULT_PEER_TIMEOUT_S, intra_op_threads: int | None = None,
             inter_op_threads: int | None = None, variable_partitioner=None) -> tf.distribute.Strategy:
    """The ``tf.distribute`` strategy TF_CONFIG calls for (created once per process, then returned again).

    - no TF_CONFIG, one chief/worker, or the evaluator: the default strategy;
    - several chief/workers and no ps: ``MultiWorkerMirroredStrategy`` with
      ``CommunicationOptions(implementation=communication, bytes_per_pack=..., timeout_seconds=...)``, after
      waiting for every other chief/worker (:func:`wait_for_peers`);
    - with ps: ``ParameterServerStrategy`` (``TFConfigClusterResolver``, ``variable_partitioner``) on the
      chief, after waiting for every ps and worker; a ps or worker instead runs its server (:func:`serve`)
      and never returns, as in TensorFlow's tutorial.

    Args:
        communication: all-reduce implementation, ``AUTO``, ``RING`` (gRPC) or ``NCCL`` (GPUs).
        bytes_per_pack: gradients are packed into all-reduces of about this many bytes (0: TF's default, one
            pack); fewer, larger all-reduces cost less per step on CPU.
        collective_timeout_s: a collective that takes longer fails (None: no limit).
        peer_timeout_s: how long to wait for the peers (default :data:`DEFAULT_PEER_TIMEOUT_S`).
        intra_op_threads / inter_op_threads: TensorFlow thread pools; None: :func:`default_threads`.

    Raises:
        ValueError: unknown ``communication``; PeerTimeoutError: a peer never came up.
    """
    import tensorflow as tf

    if _STATE["strategy"] is not None:
        return _STATE["strategy"]
    if communication.upper() not in COMMUNICATIONS:
        raise ValueError(f"communication must be one of {COMMUNICATIONS}, got {communication!r}")
    ctx = context()
    auto_intra, auto_inter = default_threads(ctx)
    intra = auto_intra if intra_op_threads is None else intra_op_threads
    inter = auto_inter if inter_op_threads is None else inter_op_threads
    kind = ctx.strategy_kind if ctx.replica_type != ReplicaType.EVALUATOR.value else Strategy.DEFAULT
    if kind is Strategy.PARAMETER_SERVER and ctx.replica_type in (ReplicaType.PS.value, ReplicaType.WORKER.value):
        serve(intra_op_threads=intra, inter_op_threads=inter)
    try:
        if intra:
            tf.config.threading.set_intra_op_parallelism_threads(intra)
        if inter:
            tf.config.threading.set_inter_op_parallelism_threads(inter)
    except RuntimeError as e:  # TensorFlow already initialised by the program
        print(f"tfk8s.runtime: thread settings not applied ({e})", flush=True)
    progress = reporter(ctx)
    progress.update("starting", force=True)
    if kind is Strategy.PARAMETER_SERVER:
        waited = wait_for_peers(_peers(ctx, ("ps", "worker")), peer_timeout_s, reporter=progress)
        print(f"{ctx.label}: every ps/worker accepts connections (waited {waited:.1f}s)", flush=True)
        resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver(rpc_layer="grpc")
        result = tf.distribute.ParameterServerStrategy(resolver, variable_partitioner=variable_partitioner)
    elif kind is Strategy.MULTI_WORKER_MIRRORED:
        own = ctx.cluster[ctx.replica_type][ctx.replica_index]
        waited = wait_for_peers(_peers(ctx, ("chief", "worker")), peer_timeout_s,
                                listen_port=int(own.rsplit(":", 1)[1]), reporter=progress)
        print(f"{ctx.label}: every chief/worker is up (waited {waited:.1f}s)", flush=True)
        impl = tf.distribute.experimental.CommunicationImplementation[communication.upper()]
        options = tf.distribute.experimental.CommunicationOptions(
            bytes_per_pack=bytes_per_pack, timeout_seconds=collective_timeout_s, implementation=impl)
        result = tf.distribute.MultiWorkerMirroredStrategy(communication_options=options)
    else:
        result = tf.distribute.get_strategy()
    _STATE["strategy"] = result
    return result


def serve(*, intra_op_threads: int = 0, inter_op_threads: int = 0) -> NoReturn:
    """Run this ps/worker's ``tf.distribute.Server`` (grpc) for the ParameterServerStrategy coordinator.

    Never returns: the launcher stops ps and workers once the chief has succeeded (TFJob semantics). The
    remote ops run on the server's own thread pools (``inter_op_threads`` 1 is raised to 2: it deadlocks).
    """
    import tensorflow as tf

    resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver(rpc_layer="grpc")
    config = tf.compat.v1.ConfigProto(intra_op_parallelism_threads=intra_op_threads,
                                      inter_op_parallelism_threads=max(inter_op_threads, PSS_MIN_INTER_OP_THREADS)
                                      if inter_op_threads else 0)
    server = tf.distribute.Server(resolver.cluster_spec(), job_name=resolver.task_type,
                                  task_index=resolver.task_id, protocol="grpc", config=config, start=True)
    print(f"{resolver.task_type}-{resolver.task_id}: serving {server.target} for the chief "
          "(ParameterServerStrategy); runs until stopped", flush=True)
    server.join()
    raise SystemExit(0)  # pragma: no cover - join() does not return
