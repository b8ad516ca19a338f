"""A pre-warmed interpreter for ``pipelines/train.py --local``: each step runs in a child forked from one Python
process that has already imported KFP and TensorFlow, instead of a fresh interpreter that imports them again.
(It is over 500 lines: both ends of one socket protocol, the server's and the client's, kept together so
that they change together.)

``kfp.local`` runs every step as ``sh -ec '<write the component to a temp file>; python -m
kfp.dsl.executor_main ...'``; three of the steps (prepare, export, evaluate) then spend about 2 s of their
3-4 s importing TensorFlow. :class:`StepServer` starts ``python -m tfk8s.localrun.step_server`` once, which imports
:data:`DEFAULT_PRELOAD` (then :data:`DEFAULT_PRELOAD_LATER` while the first step runs; importing only: no TensorFlow op, context or thread pool is created, so forking after
it is safe) and then waits for steps on a Unix socket. For each step the client (:meth:`StepServer.start`)

- recognises ``kfp.local``'s command (:func:`kfp_python_step`; anything else is left to ``subprocess``) and
  does the shell's part itself: the component source goes to ``<mktemp -d>/ephemeral_component.py``;
- sends the module, its arguments, the working directory and the whole environment, and the write end of a
  pipe (``SCM_RIGHTS``) that becomes the child's stdout and stderr (file descriptors 1 and 2, so TensorFlow's
  C++ log lines land there too);
- the server forks; the child sets the environment and working directory, fresh ``sys.stdout``/``stderr`` (as a
  new interpreter would: block-buffered stdout on a pipe, line-buffered stderr), the default signal handlers
  and a new NumPy seed, and runs the module as ``python -m`` does (:func:`runpy.run_module`, ``__main__``);
  the interpreter then exits as usual (an uncaught exception: its traceback, exit code 1; atexit handlers,
  non-daemon threads joined);
- the server waits for the child and reports its exit code (negative: killed by that signal, as
  :attr:`subprocess.Popen.returncode`).

**Two interpreters, one import.** The server imports :data:`DEFAULT_PRELOAD_LIGHT` (KFP's executor and the
steps that need no TensorFlow) first, then forks a *light* child that serves on a socket of its own, and only
then imports TensorFlow. A step that needs no TensorFlow (``start(..., light=True)``) is forked from the light
one, which is ready seconds before the other: the ``--local`` run's ensure-volume and launch steps, and the
prepare step's first try (a reuse needs no TensorFlow: :data:`tfk8s.steps.data_reuse.REUSE_ONLY_ENV`; a
miss exits 75 and the step runs again in the full one). The fork costs no import of its own.

Only a step whose environment is the one the server started with is forked (TensorFlow and Python read
some variables at import time); a step with other variables, a command of another form, a server that is not
running or busy, all run the usual way. The step is a child of the server, which is a child of the pipeline
process: :func:`tfk8s.localrun.signals.stops_reach_children` reaches both. The server exits when its socket
closes (:meth:`StepServer.close`, or the pipeline process ending). ``TFK8S_STEP_SERVER=0`` turns it off.

Local runs only: on Kubernetes each step is its own container and none of this is used.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import io
import json
import os
import re
import select
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Self

DEFAULT_PRELOAD_LIGHT = (
    "kfp.dsl.executor",  # what kfp.dsl.executor_main imports (not itself: runpy runs it as __main__)
    "components", "tfk8s.steps.cli", "tfk8s.steps.prepare_dataset", "tfk8s.steps.launch_training",
)
# imported first, then the light interpreter is forked (no TensorFlow, no NumPy in it); then DEFAULT_PRELOAD
DEFAULT_PRELOAD = (
    "tensorflow",
    "tensorflow_datasets",
    "tfk8s.steps.export_model", "tfk8s.steps.model_versions", "tfk8s.steps.evaluation",
    "tfk8s.steps.evaluate_model", "tfk8s.steps.launch_training",
)
# imported while the first step runs (the server is idle then), so the first step waits for less
DEFAULT_PRELOAD_LATER = ("matplotlib.pyplot", "tfk8s.steps.summary", "tfk8s.steps.report")
READY_TIMEOUT_S = 120.0  # longest wait for the server's imports before a step runs the usual way
DISABLE_ENV = "TFK8S_STEP_SERVER"  # "0": never start a server

# kfp.local's command for a lightweight Python component (kfp/dsl/component_factory.py), with sys.executable
# for python3 (kfp/local/subprocess_task_handler.py); $0 is the component's source, "$@" the arguments.
_KFP_SCRIPT = re.compile(
    r'\s*program_path=\$\(mktemp -d\)\s*printf "%s" "\$0" > "\$program_path/ephemeral_component\.py"\s*'
    r'(?P<env>(?:[A-Za-z_]\w*=\S*\s+)*)(?P<python>\S+) -m (?P<module>[\w.]+)\s+--component_module_path\s+'
    r'"\$program_path/ephemeral_component\.py"\s+"\$@"\s*')


@dataclass(frozen=True)
class PythonStep:
    """A step command as ``python -m module args``: the interpreter, module, its arguments after the component
    file's path, the variables the command sets, and the component source to write to that file."""
    python: str
    module: str
    args: tuple[str, ...]
    env: dict[str, str]
    source: str


def kfp_python_step(full_command: list[str]) -> PythonStep | None:
    """``kfp.local``'s command for a lightweight component (``sh -ec <script> <source> <args...>``) as a
    :class:`PythonStep`; None for any other command."""
    if len(full_command) < 3 or full_command[:2] != ["sh", "-ec"]:
        return None
    m = _KFP_SCRIPT.fullmatch(full_command[2])
    if not m or len(full_command) < 4:
        return None
    env = dict(item.split("=", 1) for item in m.group("env").split())
    return PythonStep(m.group("python"), m.group("module"), tuple(full_command[4:]), env, full_command[3])


# --- framing: 4-byte length + JSON; a file descriptor may ride along with the length (SCM_RIGHTS) ---

def _send(sock: socket.socket, obj: dict, fds: tuple[int, ...] = ()) -> None:
    data = json.dumps(obj).encode()
    header = struct.pack("!I", len(data))
    if fds:
        socket.send_fds(sock, [header], list(fds))
    else:
        sock.sendall(header)
    sock.sendall(data)


def _recv_exact(sock: socket.socket, n: int, buf: bytes = b"") -> bytes | None:
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            return None
        buf += chunk
    return buf


def _recv(sock: socket.socket, maxfds: int = 0) -> tuple[dict | None, list[int]]:
    """One message and the descriptors sent with it; ``(None, [])`` when the other end has closed."""
    if maxfds:
        header, fds, _, _ = socket.recv_fds(sock, 4, maxfds)
    else:
        header, fds = sock.recv(4), []
    if not header:
        return None, fds
    header = _recv_exact(sock, 4, header)
    data = _recv_exact(sock, struct.unpack("!I", header)[0]) if header else None
    return (json.loads(data) if data is not None else None), fds


# --- the server side (python -m tfk8s.localrun.step_server --fd N [--preload module ...]) ---

def _import(names: list[str]) -> list[str]:
    """Import each module; returns the failures (a step importing one fails as in a fresh interpreter)."""
    failed = []
    for name in names:
        try:
            importlib.import_module(name)
        except Exception as e:  # noqa: BLE001
            failed.append(f"{name}: {type(e).__name__}: {e}")
    return failed


def _serve(sock: socket.socket, later: list[str]) -> tuple[dict, int] | None:
    """Fork a child per request and report its exit code; returns ``(request, stdout fd)`` in the child,
    None in the server once the client has gone. ``later`` is imported once the first child runs."""
    import gc

    while True:
        try:
            request, fds = _recv(sock, maxfds=1)
        except (ConnectionError, OSError):
            return None
        if request is None:
            for fd in fds:
                os.close(fd)
            return None
        if len(fds) != 1:
            for fd in fds:
                os.close(fd)
            _send(sock, {"error": "no output descriptor"})
            continue
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            sock.close()
            return request, fds[0]
        os.close(fds[0])
        try:
            _send(sock, {"pid": pid})
            if later:
                _import(later)
                later = []
                gc.freeze()
            _, status = os.waitpid(pid, 0)
            _send(sock, {"pid": pid, "exitcode": os.waitstatus_to_exitcode(status)})
        except (ConnectionError, OSError):  # the client has gone: the child is its own now (as with Popen)
            return None


def _become_step(request: dict, out_fd: int) -> None:
    """In the forked child: look like a fresh ``python -m <module> <args>`` started with the request's
    environment and working directory, with stdout and stderr on ``out_fd``; then run the module."""
    import runpy

    os.dup2(out_fd, 1)
    os.dup2(out_fd, 2)
    os.close(out_fd)
    for sig in (signal.SIGTERM, signal.SIGCHLD, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1, signal.SIGUSR2):
        signal.signal(sig, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    os.environ.clear()
    os.environ.update(request["env"])
    os.chdir(request["cwd"])
    unbuffered = bool(os.environ.get("PYTHONUNBUFFERED"))
    encoding = sys.stdout.encoding if sys.stdout else "utf-8"
    sys.stdout = sys.__stdout__ = io.TextIOWrapper(
        open(1, "wb", buffering=0 if unbuffered else -1, closefd=False), encoding=encoding, errors="strict",  # noqa: SIM115
        line_buffering=False, write_through=unbuffered)
    sys.stderr = sys.__stderr__ = io.TextIOWrapper(
        open(2, "wb", buffering=0 if unbuffered else -1, closefd=False), encoding=encoding,  # noqa: SIM115
        errors="backslashreplace", line_buffering=True, write_through=unbuffered)
    if "numpy" in sys.modules:  # a fresh interpreter seeds NumPy's global generator anew (random reseeds itself)
        sys.modules["numpy"].random.seed()
    sys.path[0] = os.getcwd()  # python -m puts the working directory first
    sys.argv = ["-m", *request["args"]]  # runpy sets argv[0] to the module's file
    interrupted = False
    try:
        runpy.run_module(request["module"], run_name="__main__", alter_sys=True)
        code = 0
    except SystemExit as e:
        code = _exit_status(e.code)
    except BaseException as e:  # noqa: BLE001 - as the interpreter: the traceback on stderr, exit status 1
        sys.excepthook(type(e), e, e.__traceback__)
        code, interrupted = 1, isinstance(e, KeyboardInterrupt)
    _exit(code, interrupted)


def _exit_status(code: object) -> int:
    """The exit status ``sys.exit(code)`` gives (None: 0; not an int: printed to stderr, 1)."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    print(code, file=sys.stderr)
    return 1


def _exit(code: int, interrupted: bool = False) -> None:
    """End the child as the interpreter ends, less its teardown of every module: non-daemon threads are joined,
    atexit handlers run (logging's flush among them), stdout and stderr flushed, garbage collected (open
    files in it flushed and closed); then ``os._exit``, as :mod:`multiprocessing`'s forked children do. The
    teardown would touch every object inherited from the server (TensorFlow's too), copying its pages: 0.5 s.
    An uncaught KeyboardInterrupt ends it by SIGINT, as the interpreter does."""
    import atexit
    import gc

    try:
        for t in threading.enumerate():
            if t is not threading.main_thread() and not t.daemon:
                t.join()
        atexit._run_exitfuncs()
        gc.collect()
    finally:
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                stream.flush()
        if interrupted:
            signal.signal(signal.SIGINT, signal.SIG_DFL)
            os.kill(os.getpid(), signal.SIGINT)
        os._exit(code & 0xFF)


def _fork_light(fd: int, failed: list[str], full: socket.socket) -> tuple[dict, int] | None:
    """Fork the light interpreter, serving on socket ``fd``: in the parent, close ``fd`` and return None; in
    the child (which closes ``full``, the full interpreter's socket, and exits once its client has gone), the
    request of the step it must become."""
    import gc

    light = socket.socket(fileno=fd)
    sys.stdout.flush()
    sys.stderr.flush()
    if os.fork() != 0:
        light.close()
        return None
    full.close()
    gc.freeze()
    try:
        _send(light, {"ready": True, "pid": os.getpid(), "failed": failed})
    except OSError:
        os._exit(0)
    served = _serve(light, [])
    if served is None:
        os._exit(0)  # the client has gone: nothing of the server's (its socket) to tear down
    return served


def main(argv: list[str] | None = None) -> None:
    """The server: ``python -m tfk8s.localrun.step_server --fd N [--light-fd M --light MODULE ...] [--preload
    MODULE ...]`` (started by :class:`StepServer`; ``N`` and ``M`` are its ends of Unix stream sockets: the
    full interpreter's and the light one's)."""
    p = argparse.ArgumentParser(prog="python -m tfk8s.localrun.step_server", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--fd", type=int, required=True, help="the socket to the client")
    p.add_argument("--preload", action="append", default=[], help="module to import before serving")
    p.add_argument("--later", action="append", default=[], help="module to import once the first step runs")
    p.add_argument("--light-fd", type=int, help="the light interpreter's socket (forked before --preload)")
    p.add_argument("--light", action="append", default=[], help="module to import before the light fork")
    a = p.parse_args(argv)
    sock = socket.socket(fileno=a.fd)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C stops the step and the pipeline; the server follows
    failed = _import(a.light)
    if a.light_fd is not None:
        served = _fork_light(a.light_fd, failed, sock)
        if served is not None:  # the light interpreter's child: the step
            _become_step(*served)
            return
    failed += _import(a.preload)
    import gc

    gc.freeze()  # what the imports made stays out of the children's collections (fewer pages copied)
    try:
        _send(sock, {"ready": True, "pid": os.getpid(), "failed": failed})
    except OSError:
        return
    served = _serve(sock, a.later)
    if served is not None:
        _become_step(*served)


# --- the client side ---

class _Channel:
    """One interpreter's socket (the full one's or the light one's), whether it serves, and its lock: one step
    at a time."""

    def __init__(self, sock: socket.socket):
        self.sock = sock
        self.lock = threading.Lock()
        self.ready: bool | None = None  # None: not heard from yet
        self.failed_imports: list[str] = []


class StepProcess:
    """A step running in the server's child: ``stdout`` (its merged output, text) and :meth:`wait` (its exit
    code), like the :class:`subprocess.Popen` it stands for; a context manager closing ``stdout``."""

    def __init__(self, server: StepServer, pid: int, stdout: IO[str], channel: _Channel | None = None):
        self.server, self.pid, self.stdout = server, pid, stdout
        self.channel = channel if channel is not None else server._main
        self.returncode: int | None = None

    def wait(self) -> int:
        """The step's exit code, once it has exited (1 if the server went away without telling it)."""
        if self.returncode is None:
            self.returncode = self.server._wait_exit(self.pid, self.channel)
        return self.returncode

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc) -> None:
        self.stdout.close()
        if self.returncode is None and exc[0] is not KeyboardInterrupt:
            self.wait()


class StepServer:
    """Client of a ``python -m tfk8s.localrun.step_server`` it starts at once (its imports run while the pipeline goes
    on); :meth:`start` runs a step there, :meth:`close` stops it.

    Args:
        preload: modules the server imports before serving.
        later: modules it imports once the first step runs (while it waits for that step).
        light: modules imported first, before the light interpreter is forked (``start(..., light=True)``);
            empty: no light interpreter.
        log: file for the server's own output (its imports' messages); default: discarded.
        python: the interpreter (a step is forked only if its command names this one).
        env: the environment of the server and of the steps it may run (default: ``os.environ`` now).
    """

    def __init__(self, preload: tuple[str, ...] = DEFAULT_PRELOAD, later: tuple[str, ...] = DEFAULT_PRELOAD_LATER,
                 log: str | os.PathLike | None = None,
                 python: str = sys.executable, env: dict[str, str] | None = None,
                 light: tuple[str, ...] = DEFAULT_PRELOAD_LIGHT):
        self.python = python
        self.env = dict(os.environ if env is None else env)
        mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        self._main = _Channel(mine)
        self._light: _Channel | None = None
        fds = [theirs]
        if light:
            light_mine, light_theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
            self._light = _Channel(light_mine)
            fds.append(light_theirs)
        out = open(log, "wb") if log else subprocess.DEVNULL  # noqa: SIM115
        try:
            args = [python, "-m", "tfk8s.localrun.step_server", "--fd", str(theirs.fileno())]
            if light:
                args += ["--light-fd", str(fds[1].fileno())]
                for name in light:
                    args += ["--light", name]
            for name in preload:
                args += ["--preload", name]
            for name in later:
                args += ["--later", name]
            self.proc = subprocess.Popen(args, pass_fds=[f.fileno() for f in fds], stdout=out,
                                         stderr=subprocess.STDOUT, env={**self.env, "_KFP_RUNTIME": "true"})
        finally:
            for f in fds:
                f.close()
            if log:
                out.close()

    @property
    def failed_imports(self) -> list[str]:
        """The modules the full interpreter could not import (``module: error``), once it is ready."""
        return self._main.failed_imports

    def ready(self, timeout: float = READY_TIMEOUT_S, *, light: bool = False) -> bool:
        """Whether the server (``light``: its light interpreter) has imported its modules and serves (waits for
        it up to ``timeout`` seconds). A light interpreter that never started is not ready; the full one
        failing closes the server."""
        channel = self._light if light else self._main
        if channel is None:
            return False
        if channel.ready is None:
            readable, _, _ = select.select([channel.sock], [], [], timeout)
            msg = None
            if not readable and timeout == 0:
                return False  # still importing: asked not to wait
            if readable:
                with contextlib.suppress(OSError, ValueError):
                    msg, _ = _recv(channel.sock)
            channel.ready = bool(msg and msg.get("ready"))
            if channel.ready:
                channel.failed_imports = list(msg.get("failed") or [])
            elif not light:
                self.close()
        return channel.ready

    def start(self, full_command: list[str], env: dict[str, str], *, wait_ready: bool = True,
              light: bool = False, extra_env: dict[str, str] | None = None) -> StepProcess | None:
        """Run ``full_command`` (a ``kfp.local`` step) with environment ``env`` in a forked child; None when it
        cannot be (another command form or interpreter, another environment, server not running or busy, or
        still importing and ``wait_ready`` is False: a step that needs no TensorFlow starts faster on its own
        than it would wait): run it the usual way then.

        Args:
            light: in the light interpreter (no TensorFlow imported; ready sooner); None when there is none.
            extra_env: variables the step gets besides ``env`` (which must still be the server's).
        """
        step = kfp_python_step(full_command)
        if step is None or step.python != self.python or env != self.env:
            return None
        channel = self._light if light else self._main
        if channel is None:
            return None
        if not wait_ready and channel.ready is None and not self.ready(timeout=0, light=light):
            return None
        if not self.ready(light=light):
            return None
        if not channel.lock.acquire(blocking=False):
            return None
        folder = tempfile.mkdtemp()  # the shell's part: program_path=$(mktemp -d); printf "%s" "$0" > ...
        component = Path(folder) / "ephemeral_component.py"
        component.write_bytes(os.fsencode(step.source))
        read_fd, write_fd = os.pipe()
        try:
            _send(channel.sock, {"module": step.module, "args": ["--component_module_path", str(component),
                                                                 *step.args],
                                 "env": {**env, **step.env, **(extra_env or {})}, "cwd": os.getcwd()}, (write_fd,))
            os.close(write_fd)
            write_fd = -1
            reply, _ = _recv(channel.sock)
            if not reply or "pid" not in reply:
                raise OSError(f"the step server did not start the step: {reply}")
        except OSError:
            for fd in (read_fd, write_fd):
                if fd >= 0:
                    os.close(fd)
            channel.lock.release()
            channel.ready = False
            if not light:
                self.close()
            return None
        return StepProcess(self, int(reply["pid"]), open(read_fd, encoding=None), channel)  # as Popen(text=True)

    def _wait_exit(self, pid: int, channel: _Channel | None = None) -> int:
        channel = channel if channel is not None else self._main
        try:
            reply, _ = _recv(channel.sock)
        except OSError:
            reply = None
        finally:
            channel.lock.release()
        if not reply or reply.get("pid") != pid or "exitcode" not in reply:
            channel.ready = False
            if channel is self._main:
                self.close()
            return 1
        return int(reply["exitcode"])

    def close(self, timeout: float = 10.0) -> None:
        """Stop the server: it exits when its socket closes (once its step, if one runs, has ended; killed
        after ``timeout`` seconds); one still importing is terminated. The light interpreter exits when its
        own socket closes (once its step, if one runs, has ended)."""
        serving, self._main.ready = self._main.ready, False
        for channel in (self._main, self._light):
            if channel is not None:
                channel.ready = False
                with contextlib.suppress(OSError):
                    channel.sock.close()
        if self.proc.poll() is None:
            if not serving:
                self.proc.terminate()
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def enabled(env: dict[str, str] | None = None) -> bool:
    """Whether ``--local`` steps may use a :class:`StepServer` (not when ``TFK8S_STEP_SERVER=0``)."""
    return (os.environ if env is None else env).get(DISABLE_ENV, "1") != "0"


if __name__ == "__main__":
    main()
