"""A pre-warmed interpreter for ``pipelines/train.py --local``: each step runs in a child forked from one Python
process that has already imported KFP and TensorFlow, instead of a fresh interpreter that imports them again.

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

Only a step whose environment is the one the server started with is forked (TensorFlow and Python read
some variables at import time); a step with other variables, a command of another form, a server that is not
running or busy, all run the usual way. The step is a child of the server, which is a child of the pipeline
process: :func:`tfk8s.localrun.signals.sigterm_reaches_children` reaches both. The server exits when its socket
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

DEFAULT_PRELOAD = (
    "kfp.dsl.executor",  # what kfp.dsl.executor_main imports (not itself: runpy runs it as __main__)
    "tensorflow",
    "tensorflow_datasets",
    "tfk8s.steps.prepare_dataset", "tfk8s.steps.export_model", "tfk8s.steps.model_versions", "tfk8s.steps.evaluation",
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


def main(argv: list[str] | None = None) -> None:
    """The server: ``python -m tfk8s.localrun.step_server --fd N [--preload MODULE ...]`` (started by
    :class:`StepServer`; ``N`` is its end of a Unix stream socket)."""
    p = argparse.ArgumentParser(prog="python -m tfk8s.localrun.step_server", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--fd", type=int, required=True, help="the socket to the client")
    p.add_argument("--preload", action="append", default=[], help="module to import before serving")
    p.add_argument("--later", action="append", default=[], help="module to import once the first step runs")
    a = p.parse_args(argv)
    sock = socket.socket(fileno=a.fd)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C stops the step and the pipeline; the server follows
    failed = _import(a.preload)
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

class StepProcess:
    """A step running in the server's child: ``stdout`` (its merged output, text) and :meth:`wait` (its exit
    code), like the :class:`subprocess.Popen` it stands for; a context manager closing ``stdout``."""

    def __init__(self, server: StepServer, pid: int, stdout: IO[str]):
        self.server, self.pid, self.stdout = server, pid, stdout
        self.returncode: int | None = None

    def wait(self) -> int:
        """The step's exit code, once it has exited (1 if the server went away without telling it)."""
        if self.returncode is None:
            self.returncode = self.server._wait_exit(self.pid)
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
        log: file for the server's own output (its imports' messages); default: discarded.
        python: the interpreter (a step is forked only if its command names this one).
        env: the environment of the server and of the steps it may run (default: ``os.environ`` now).
    """

    def __init__(self, preload: tuple[str, ...] = DEFAULT_PRELOAD, later: tuple[str, ...] = DEFAULT_PRELOAD_LATER,
                 log: str | os.PathLike | None = None,
                 python: str = sys.executable, env: dict[str, str] | None = None):
        self.python = python
        self.env = dict(os.environ if env is None else env)
        self._lock = threading.Lock()
        self._ready: bool | None = None
        self.failed_imports: list[str] = []
        mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        self._sock = mine
        out = open(log, "wb") if log else subprocess.DEVNULL  # noqa: SIM115
        try:
            args = [python, "-m", "tfk8s.localrun.step_server", "--fd", str(theirs.fileno())]
            for name in preload:
                args += ["--preload", name]
            for name in later:
                args += ["--later", name]
            self.proc = subprocess.Popen(args, pass_fds=[theirs.fileno()], stdout=out, stderr=subprocess.STDOUT,
                                         env={**self.env, "_KFP_RUNTIME": "true"})
        finally:
            theirs.close()
            if log:
                out.close()

    def ready(self, timeout: float = READY_TIMEOUT_S) -> bool:
        """Whether the server has imported its modules and serves (waits for it up to ``timeout`` seconds)."""
        if self._ready is None:
            readable, _, _ = select.select([self._sock], [], [], timeout)
            msg = None
            if not readable and timeout == 0:
                return False  # still importing: asked not to wait
            if readable:
                with contextlib.suppress(OSError, ValueError):
                    msg, _ = _recv(self._sock)
            self._ready = bool(msg and msg.get("ready"))
            if self._ready:
                self.failed_imports = list(msg.get("failed") or [])
            else:
                self.close()
        return self._ready

    def start(self, full_command: list[str], env: dict[str, str], *, wait_ready: bool = True) -> StepProcess | None:
        """Run ``full_command`` (a ``kfp.local`` step) with environment ``env`` in a forked child; None when it
        cannot be (another command form or interpreter, another environment, server not running or busy, or
        still importing and ``wait_ready`` is False: a step that needs no TensorFlow starts faster on its own
        than it would wait): run it the usual way then."""
        step = kfp_python_step(full_command)
        if step is None or step.python != self.python or env != self.env:
            return None
        if not wait_ready and self._ready is None and not self.ready(timeout=0):
            return None
        if not self.ready():
            return None
        if not self._lock.acquire(blocking=False):
            return None
        folder = tempfile.mkdtemp()  # the shell's part: program_path=$(mktemp -d); printf "%s" "$0" > ...
        component = Path(folder) / "ephemeral_component.py"
        component.write_bytes(os.fsencode(step.source))
        read_fd, write_fd = os.pipe()
        try:
            _send(self._sock, {"module": step.module, "args": ["--component_module_path", str(component),
                                                               *step.args],
                               "env": {**env, **step.env}, "cwd": os.getcwd()}, (write_fd,))
            os.close(write_fd)
            write_fd = -1
            reply, _ = _recv(self._sock)
            if not reply or "pid" not in reply:
                raise OSError(f"the step server did not start the step: {reply}")
        except OSError:
            for fd in (read_fd, write_fd):
                if fd >= 0:
                    os.close(fd)
            self._lock.release()
            self._ready = False
            self.close()
            return None
        return StepProcess(self, int(reply["pid"]), open(read_fd, encoding=None))  # as Popen(text=True)

    def _wait_exit(self, pid: int) -> int:
        try:
            reply, _ = _recv(self._sock)
        except OSError:
            reply = None
        finally:
            self._lock.release()
        if not reply or reply.get("pid") != pid or "exitcode" not in reply:
            self._ready = False
            self.close()
            return 1
        return int(reply["exitcode"])

    def close(self, timeout: float = 10.0) -> None:
        """Stop the server: it exits when its socket closes (once its step, if one runs, has ended; killed
        after ``timeout`` seconds); one still importing is terminated."""
        serving, self._ready = self._ready, False
        with contextlib.suppress(OSError):
            self._sock.close()
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
