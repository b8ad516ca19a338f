"""Shared helpers of the benchmarks: the one-line figure format, interleaved repetitions, cached data.

Every benchmark prints one line per figure (:meth:`Figure.line`)::

    bench trainer_overhead: ratio=0.973 goal>=0.95 met | trainer=8123 examples/s | model.fit=8349 examples/s | cores=2 | median of 3 interleaved

- ``ratio`` is ``a / b`` of the two absolute numbers that follow, each the median of its repetitions;
- ``goal`` is the issue's goal for the figure, ``met`` / ``missed`` the verdict (``info`` when it has none);
- ``cores``: CPU cores the measured processes could use together (this machine's affinity mask).

Side by side: the variants of one figure are measured in the same run, alternating (A B, B A, A B...), so a
neighbour's load on a shared machine hits both alike; the median of the repetitions is reported.
:func:`parse_line` reads a line back (the smoke test and the README table use it).
"""

from __future__ import annotations

import json
import math
import os
import re
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

DEFAULT_CACHE = REPO / "volume" / "bench-cache"  # prepared data, reused between runs (./volume is git-ignored)
# Before TensorFlow starts in any benchmark process (Keras 2 under tf.distribute; quiet logs).
TF_ENV = {"TF_USE_LEGACY_KERAS": "1", "TF_CPP_MIN_LOG_LEVEL": "2"}


def usable_cores() -> int:
    """CPU cores this process may run on (its affinity mask; ``os.cpu_count()`` where there is none)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


@dataclass(frozen=True)
class Figure:
    """One benchmark figure: ``ratio = a / b``, with the goal it is held against.

    Attributes:
        name: short identifier, e.g. ``trainer_overhead`` or ``scaling_2w_pack64k``.
        a, b: the two absolute numbers (medians); ``a_label``/``b_label`` say what each is, ``unit`` in what.
        goal: ``">= 0.95"``, ``"<= 1.3"`` or ``""`` (no goal: the figure is information).
        cores: CPU cores used by the measured processes together.
        note: anything a reader needs (sizes, repetitions, what was measured).
    """

    name: str
    a: float
    a_label: str
    b: float
    b_label: str
    unit: str
    goal: str
    cores: int
    note: str = ""
    extra: dict = field(default_factory=dict)

    @property
    def ratio(self) -> float:
        return self.a / self.b if self.b else math.inf if self.a else math.nan

    @property
    def verdict(self) -> str:
        """``met``, ``missed`` or ``info`` (no goal)."""
        if not self.goal:
            return "info"
        op, value = self.goal.split()
        ok = self.ratio >= float(value) if op == ">=" else self.ratio <= float(value)
        return "met" if ok else "missed"

    def line(self) -> str:
        """The figure as one line (the format of the module docstring)."""
        goal = f"goal{self.goal.replace(' ', '')}" if self.goal else "goal=none"
        parts = [f"bench {self.name}: ratio={self.ratio:.3f} {goal} {self.verdict}",
                 f"{self.a_label}={_num(self.a)} {self.unit}", f"{self.b_label}={_num(self.b)} {self.unit}",
                 f"cores={self.cores}"]
        if self.note:
            parts.append(self.note)
        return " | ".join(parts)

    def as_json(self) -> dict:
        return {**asdict(self), "ratio": self.ratio, "verdict": self.verdict}


def _num(x: float) -> str:
    if not math.isfinite(x):
        return str(x)
    return f"{x:.0f}" if abs(x) >= 100 else f"{x:.3g}"


_LINE = re.compile(
    r"^bench (?P<name>[\w.-]+): ratio=(?P<ratio>\S+) goal(?P<goal>[<>]=[\d.]+|=none) (?P<verdict>met|missed|info)"
    r" \| (?P<a_label>[^=|]+)=(?P<a>\S+) (?P<unit>[^|]+?) \| (?P<b_label>[^=|]+)=(?P<b>\S+) (?P=unit)"
    r" \| cores=(?P<cores>\d+)(?: \| (?P<note>.*))?$")


def parse_line(line: str) -> dict | None:
    """The fields of a figure line (:meth:`Figure.line`), numbers as floats; None if ``line`` is not one."""
    m = _LINE.match(line.strip())
    if not m:
        return None
    d = m.groupdict()
    for k in ("ratio", "a", "b"):
        d[k] = float(d[k])
    d["cores"] = int(d["cores"])
    return d


def report(figures: Sequence[Figure], out: str | os.PathLike | None = None) -> None:
    """Print each figure's line; with ``out``, also append each as a JSON line to that file."""
    for f in figures:
        print(f.line(), flush=True)
    if out:
        with open(out, "a", encoding="utf-8") as fh:
            for f in figures:
                fh.write(json.dumps({"time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), **f.as_json()})
                         + "\n")


def interleaved(variants: dict[str, Callable[[], float]], reps: int,
                log: Callable[[str], None] = lambda s: print(s, file=sys.stderr, flush=True)
                ) -> dict[str, list[float]]:
    """Run every variant ``reps`` times, alternating the order each round (A B C, C B A, ...).

    Returns ``{name: [value per repetition]}`` (each variant's callable returns one measured number).
    """
    values: dict[str, list[float]] = {k: [] for k in variants}
    names = list(variants)
    for r in range(reps):
        for name in names if r % 2 == 0 else reversed(names):
            v = variants[name]()
            values[name].append(v)
            log(f"  rep {r + 1}/{reps} {name}: {v:.4g}")
    return values


def median(xs: Sequence[float]) -> float:
    return statistics.median(xs) if xs else math.nan


def common_args(p, *, reps: int = 3) -> None:
    """Flags every benchmark takes: --smoke, --reps, --out, --cache-dir."""
    p.add_argument("--smoke", action="store_true", help="tiny sizes, one repetition: checks the figures appear")
    p.add_argument("--reps", type=int, default=None, help=f"interleaved repetitions (default {reps}; smoke: 1)")
    p.add_argument("--out", default=None, help="append each figure as a JSON line to this file")
    p.add_argument("--cache-dir", default=str(DEFAULT_CACHE), help="prepared data sets (default: %(default)s)")
    p.set_defaults(_default_reps=reps)


def reps_of(a) -> int:
    return a.reps or (1 if a.smoke else a._default_reps)


def prepared_mnist(cache_dir: str | os.PathLike, examples: int, shards: int) -> Path:
    """A prepared MNIST data dir (``tfk8s.steps.prepare_dataset.prepare_dataset``: at most ``examples`` per split, ``shards``
    files), made once under ``cache_dir`` and reused; from the TFDS data dir the pipeline uses."""
    from tfk8s.core.data_format import load_metadata
    from tfk8s.steps.prepare_dataset import default_tfds_data_dir, prepare_dataset

    out = Path(cache_dir) / f"mnist-{examples or 'all'}-{shards}"
    try:
        load_metadata(out)
        return out
    except (FileNotFoundError, ValueError):
        pass
    prepare_dataset("mnist", out, tfds_data_dir=default_tfds_data_dir(), num_shards=shards,
                    max_examples=examples or None)
    return out


def python_env(extra: dict | None = None) -> dict:
    """Environment for a benchmark subprocess: the repo first on PYTHONPATH, TensorFlow settings."""
    path = os.pathsep.join([str(REPO)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p])
    return {**os.environ, **TF_ENV, "PYTHONPATH": path, "PYTHONUNBUFFERED": "1", **(extra or {})}


def run_python(args: Sequence[str], *, env: dict | None = None, timeout: float = 1800) -> str:
    """Run ``python args...`` (this interpreter) in the repo; returns stdout.

    Raises:
        RuntimeError: non-zero exit, with the last lines of its output.
    """
    p = subprocess.run([sys.executable, *args], check=False, cwd=REPO, env=python_env(env), capture_output=True,
                       text=True, timeout=timeout)
    if p.returncode != 0:
        tail = "\n".join((p.stdout + p.stderr).splitlines()[-25:])
        raise RuntimeError(f"{' '.join(args[:3])}... exited {p.returncode}:\n{tail}")
    return p.stdout


def last_json(stdout: str) -> dict:
    """The last line of ``stdout`` that is a JSON object (what the bench helpers print at the end)."""
    for line in reversed(stdout.splitlines()):
        line = line.strip()
        if line.startswith("{"):
            return json.loads(line)
    raise RuntimeError(f"no JSON result in the output:\n{stdout[-2000:]}")


def find_metric(d: dict, key: str):
    """``d[key]``, looked up in nested dicts too (a training summary may keep the program's metrics under a
    sub-object); None if absent."""
    if key in d:
        return d[key]
    for v in d.values():
        if isinstance(v, dict):
            found = find_metric(v, key)
            if found is not None:
                return found
    return None


def read_training_result(train_dir: str | os.PathLike) -> dict:
    """What the trainer reported in ``train_dir``: its metrics file (``metrics/*.json``, the contract's
    ``TFK8S_METRICS_FILE``) merged over ``training_summary.json``, whichever exist.

    Raises:
        RuntimeError: neither exists.
    """
    d = Path(train_dir)
    found: dict = {}
    for f in [d / "training_summary.json", *sorted((d / "metrics").glob("*.json"))]:
        if f.is_file():
            found.update(json.loads(f.read_text()))
    if not found:
        raise RuntimeError(f"the trainer wrote neither training_summary.json nor metrics/*.json in {d}")
    return found


def examples_per_sec(summary: dict, *, steady: bool = False) -> float:
    """The trainer's examples/sec from its summary; ``steady``: the fastest epoch after the first (the first
    also traces the step function and fills the input buffers), when per-epoch times are there."""
    times = find_metric(summary, "epoch_times_s")
    steps, batch = find_metric(summary, "steps_per_epoch"), find_metric(summary, "global_batch_size")
    if steady and times and len(times) > 1 and steps and batch:
        return steps * batch / min(times[1:])
    value = find_metric(summary, "examples_per_sec")
    if value is None:
        raise RuntimeError(f"no examples_per_sec in the training summary {summary}")
    return float(value)


def run_trainer(data_dir: str | os.PathLike, train_dir: str | os.PathLike, *, epochs: int, batch_size: int,
                threads: int, extra: Sequence[str] = ()) -> dict:
    """The built-in trainer as one process (no TF_CONFIG), ``threads`` intra- and inter-op threads; returns
    what it reported (:func:`read_training_result`)."""
    from tfk8s.core.builtin_trainer import DEFAULT_LEARNING_RATE, TRAINER_MODULE, trainer_args

    train_dir = Path(train_dir)
    env = {"TFK8S_MODEL_DIR": str(train_dir / "saved_model"), "TFK8S_DATA_DIR": str(data_dir),
           "TFK8S_CHECKPOINT_DIR": str(train_dir / "checkpoints"), "TFK8S_TENSORBOARD_DIR": str(train_dir / "logs"),
           "TFK8S_METRICS_FILE": str(train_dir / "metrics" / "chief-0.json"),
           "TFK8S_PROGRESS_FILE": str(train_dir / "progress" / "chief-0.json")}
    (train_dir / "metrics").mkdir(parents=True, exist_ok=True)
    run_python(["-m", TRAINER_MODULE, *trainer_args(data_dir, train_dir, epochs, batch_size, DEFAULT_LEARNING_RATE),
                "--intra-op-threads", str(threads), "--inter-op-threads", str(threads), *extra], env=env)
    return read_training_result(train_dir)
