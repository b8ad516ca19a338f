"""A run's hold on the prepared data it reads (``<root>/runs/<run id>/data-hold.json``), so that ``tfk8s datasets
delete`` never removes a folder a step of the run can still read.

The run, not only its training job, holds the folder its data record names (:mod:`tfk8s.core.data_store`), for as
long as one of its steps can still read it: the launch step (its training job) and, after the job, the evaluate
step, which reads the test split. Each of them marks the hold while it runs (:func:`reading`, refreshed every
:data:`HEARTBEAT_S`); the last one (evaluate) releases it when it ends, and a step that fails releases it too (the
run's later steps do not run: :func:`release_hold`). A run killed between its steps leaves its hold unreleased: it
lasts :data:`HOLD_S` after the run's last sign of life (its data record, its job's end, a step's last heartbeat),
then counts as gone (``tfk8s datasets``, :func:`tfk8s.cmd.datasets.holds`). Plain Python (standard library only).
"""

from __future__ import annotations

import json
import os
import socket
import threading
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from tfk8s.core.layout import DATA_HOLD_FILE, DATA_RECORD_FILE

HOLD_S = 3600.0
"""How long a run's unreleased hold lasts after the run's last sign of life (its data record written, its job's
end, a reading step's last heartbeat): a run killed between its steps (an evicted pod, a cancelled run) is gone
after that."""
HEARTBEAT_S = 30.0
"""How often a step that reads the data refreshes the run's hold (:func:`reading`)."""
READING_FRESH_S = 4 * HEARTBEAT_S
"""A reading step heard from within this long reads the data now (its folder is never deleted, even with
``--force``); older, it may be gone (killed without releasing)."""


def _write_hold(run_dir: Path, doc: Mapping[str, Any]) -> None:
    path = Path(run_dir) / DATA_HOLD_FILE
    tmp = path.with_name(f".{path.name}.tmp-{socket.gethostname()}-{os.getpid()}-{threading.get_ident()}")
    try:
        tmp.write_text(json.dumps(dict(doc), sort_keys=True) + "\n")
        os.replace(tmp, path)
    except OSError:  # the hold protects the data from `tfk8s datasets delete`; it never fails a step
        try:
            tmp.unlink()
        except OSError:
            pass


def read_hold(run_dir: str | os.PathLike) -> dict[str, Any] | None:
    """The run's hold (``<run dir>/data-hold.json``): ``state`` (``reading``: ``step`` runs, ``updated`` its last
    heartbeat; ``between steps``: ``step`` ended, a later one reads the data next; ``released``: no step of the run
    reads it any more, ``why``), ``step`` and Unix seconds ``since``, ``updated``; None without one."""
    try:
        doc = json.loads((Path(run_dir) / DATA_HOLD_FILE).read_text())
    except (OSError, ValueError):
        return None
    return doc if isinstance(doc, dict) else None


@contextmanager
def reading(run_dir: str | os.PathLike, step: str, *, last: bool) -> Iterator[None]:
    """Hold the run's data while the body (step ``step`` of the run at ``run_dir``) runs: the hold says ``reading``
    and is refreshed every :data:`HEARTBEAT_S`; when the body ends it says ``between steps`` (a later step reads
    the data next), or ``released`` when ``last`` (the run's last step that reads it) or when the body raised (the
    run's later steps do not run). Nothing is held for a run without a data record (no store folder named) or
    where the volume cannot be written."""
    run_dir = Path(run_dir)
    if not (run_dir / DATA_RECORD_FILE).is_file():
        yield
        return
    since = time.time()
    base = {"step": step, "since": since, "host": socket.gethostname(), "pid": os.getpid()}
    _write_hold(run_dir, {**base, "state": "reading", "updated": since})
    done = threading.Event()

    def beat() -> None:
        while not done.wait(HEARTBEAT_S):
            _write_hold(run_dir, {**base, "state": "reading", "updated": time.time()})

    beater = threading.Thread(target=beat, daemon=True, name="data-hold")
    beater.start()
    failed = True
    try:
        yield
        failed = False
    finally:
        done.set()
        beater.join()
        now = time.time()
        if failed:
            _write_hold(run_dir, {**base, "state": "released", "updated": now,
                                  "why": f"its {step} step failed (the run's later steps do not run)"})
        elif last:
            _write_hold(run_dir, {**base, "state": "released", "updated": now,
                                  "why": f"its {step} step, the last that reads it, ended"})
        else:
            _write_hold(run_dir, {**base, "state": "between steps", "updated": now})


def release_hold(run_dir: str | os.PathLike, why: str) -> None:
    """Release the run's hold (a step between the readers failed: the run's later steps do not run); nothing
    when it holds nothing or has released it."""
    run_dir = Path(run_dir)
    hold = read_hold(run_dir)
    if hold is None or hold.get("state") == "released":
        return
    _write_hold(run_dir, {**hold, "state": "released", "updated": time.time(), "why": why})
