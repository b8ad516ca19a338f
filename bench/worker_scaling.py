"""Benchmark 2, scaling: N local workers with one intra-op thread each vs one worker with one thread.

    python bench/worker_scaling.py [--workers 2] [--per-worker-batch 256] [--options trainer,default,...]

Every run goes through the local launcher (``tfk8s.steps.launch_training.build_job`` / ``run_local``: TF_CONFIG, one
process per worker on 127.0.0.1), with the per-worker batch fixed (the N-worker run's global batch is N times
the 1-worker one) and ``--intra-op-threads 1 --inter-op-threads 1`` per worker unless the option says else.
Throughput is the steady state: the fastest epoch after the first (which also traces and warms up), over all
workers. Each option's 1-worker run uses the same per-worker batch and accumulation, so the ratio isolates
what N workers and their all-reduce cost.

Options (figure ``scaling_<option>``):

- ``trainer``: the built-in trainer as it is (``python -m trainer.task``, its defaults: 8 steps per call),
  per-worker batch ``B``; ``trainer_spe1``: the same with ``--steps-per-execution 1`` (one step per call);
- ``independent``: the ceiling: N prototype processes at once, each training alone (no TF_CONFIG cluster, no
  all-reduce), their examples/sec added up: what the cores give N single-thread processes right now;
- ``default``: the prototype trainer (``python -m bench.procs mwms``: ``tf.distribute`` directly, the same
  model and input pipeline) with TF's default collective options (one pack, AUTO = RING on CPU) and the
  built-in model's training step (``trainer.model.OneAllReduceModel``: gradients and metrics in ONE
  all-reduce per step);
- ``keras_step``: the same with Keras' own training step (the gradient all-reduce plus one all-reduce per
  logged metric: 3 collectives per step), what the trainer did before;
- ``ring``: ``CommunicationImplementation.RING`` explicitly; ``pack64k``: ``bytes_per_pack=65536`` (gradients
  all-reduced in several packs, so the first can start while the rest are computed);
- ``overlap``: ``pack64k`` with 2 inter-op threads per worker, so a pack's all-reduce can run beside the
  backward pass of earlier layers;
- ``spe8``: ``steps_per_execution=8`` (8 steps per ``tf.function`` call: less per-step dispatch);
- ``accum4``: gradient accumulation, 4 micro-batches of ``B`` per all-reduce (per-worker batch 4B, computed
  as 4 x B: the same arithmetic per example as ``default``, a quarter of the all-reduces);
- ``b4x``: per-worker batch 4B (one all-reduce per 4B examples per worker; bigger matrix products too).

The goal (>= 1.8 for N = 2) is held against each option. On a machine with fewer cores than workers the
ratio cannot exceed cores / 1.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import (
    Figure,
    common_args,
    examples_per_sec,
    interleaved,
    median,
    prepared_mnist,
    read_training_result,
    report,
    reps_of,
    usable_cores,
)

OPTIONS = ("trainer", "trainer_spe1", "independent", "default", "ring", "pack64k", "overlap", "spe8", "accum4", "b4x", "keras_step")
DEFAULT_OPTIONS = OPTIONS


def _variant(option: str, batch: int) -> dict:
    """The prototype's flags and per-worker compute for ``option``: (flags, batch, accumulate, inter)."""
    v = {"flags": [], "batch": batch, "accumulate": 1, "inter": 1, "spe": 1}
    if option == "ring":
        v["flags"] = ["--implementation", "ring"]
    elif option == "pack64k":
        v["flags"] = ["--bytes-per-pack", "65536"]
    elif option == "overlap":
        v["flags"], v["inter"] = ["--bytes-per-pack", "65536"], 2
    elif option == "spe8":
        v["flags"], v["spe"] = ["--steps-per-execution", "8"], 8
    elif option == "independent":
        v["flags"] = ["--independent"]
    elif option == "accum4":
        v["batch"], v["accumulate"] = 4 * batch, 4
    elif option == "keras_step":
        v["flags"] = ["--keras-step"]
    elif option == "b4x":
        v["batch"] = 4 * batch
    return v


def run_workers(data: Path, tmp: Path, option: str, workers: int, batch: int, epochs: int, steps: int) -> float:
    """One job of ``workers`` local workers for ``option``; returns its steady examples/sec (all workers)."""
    from tfk8s.core.builtin_trainer import DEFAULT_LEARNING_RATE, TRAINER_ENV, trainer_args
    from tfk8s.core.cluster import ReplicaCounts
    from tfk8s.core.job import TrainingJob
    from tfk8s.launcher.backends import get_backend
    from tfk8s.launcher.local import run_local
    from tfk8s.steps.launch_training import build_job, run_job

    out = tmp / f"{option}-{workers}w-{len(list(tmp.iterdir()))}"
    out.mkdir(parents=True)
    if option.startswith("trainer"):
        args = trainer_args(data, out, epochs, batch * workers, DEFAULT_LEARNING_RATE)
        args += ["--steps-per-epoch", str(steps), "--intra-op-threads", "1", "--inter-op-threads", "1"]
        if option == "trainer_spe1":
            args += ["--steps-per-execution", "1"]
        local = get_backend("local")
        job = build_job(name=f"bench-{workers}w", counts=ReplicaCounts(worker=workers), args=args, backend=local,
                        train_dir=out, data_dir=data)
        run_job(job, local, out, log_sink=lambda _line: None)
        return examples_per_sec(read_training_result(out), steady=True)
    v = _variant(option, batch)
    result = out / "result-{replica_index}.json"  # substituted per replica (tfk8s.core.contract)
    command = (sys.executable, "-m", "bench.procs", "mwms", "--data-dir", str(data),
               "--per-worker-batch", str(v["batch"]), "--accumulate", str(v["accumulate"]),
               "--epochs", str(epochs), "--steps-per-epoch", str(steps), "--intra", "1", "--inter", str(v["inter"]),
               "--out", str(result), *v["flags"])
    env = {**TRAINER_ENV, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    job = TrainingJob(name=f"bench-{workers}w", counts=ReplicaCounts(worker=workers), command=command, env=env)
    run_local(job, log_sink=lambda _line: None, cwd=Path(__file__).resolve().parents[1])
    if option == "independent":  # every process alone: their throughputs add up
        return sum(float(json.loads(f.read_text())["examples_per_sec"]) for f in out.glob("result-*.json"))
    return float(json.loads((out / "result-0.json").read_text())["examples_per_sec"])


def main(argv: list[str] | None = None) -> list[Figure]:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--per-worker-batch", type=int, default=256)
    p.add_argument("--epochs", type=int, default=3, help="the fastest epoch after the first counts")
    p.add_argument("--steps-per-epoch", type=int, default=30, help="global steps per epoch")
    p.add_argument("--examples", type=int, default=0, help="training examples in the data (0: all)")
    p.add_argument("--options", default=",".join(DEFAULT_OPTIONS), help=f"comma-separated, of {OPTIONS}")
    common_args(p, reps=2)
    a = p.parse_args(argv)
    options = [o for o in a.options.split(",") if o]
    unknown = set(options) - set(OPTIONS)
    if unknown:
        p.error(f"unknown --options {sorted(unknown)}; known: {OPTIONS}")
    if a.smoke:
        a.examples, a.epochs, a.steps_per_epoch, a.per_worker_batch = 1024, 2, 3, 64
        options = [o for o in options if o == "trainer"] or options[:1]
    data = prepared_mnist(a.cache_dir, a.examples, 4 * a.workers)
    # One 1-worker baseline per distinct per-worker computation (collective options change nothing there; the
    # 1-worker run of an option that changes the computation, or the loop, runs with that option too).
    def key(o: str) -> str:
        v = _variant(o, a.per_worker_batch)
        return o if o.startswith("trainer") else f"b{v['batch']}/acc{v['accumulate']}/spe{v['spe']}"

    base_key = {o: key(o) for o in options}
    with tempfile.TemporaryDirectory(prefix="bench-scaling-") as tmp:
        variants = {}
        for key in dict.fromkeys(base_key.values()):
            o = next(o for o in options if base_key[o] == key)
            variants[f"1w:{key}"] = (
                lambda o=o: run_workers(data, Path(tmp), o, 1, a.per_worker_batch, a.epochs, a.steps_per_epoch))
        for o in options:
            variants[f"{a.workers}w:{o}"] = (
                lambda o=o: run_workers(data, Path(tmp), o, a.workers, a.per_worker_batch, a.epochs,
                                        a.steps_per_epoch))
        values = interleaved(variants, reps_of(a))
    figures = []
    cores = min(usable_cores(), a.workers)
    for o in options:
        v = _variant(o, a.per_worker_batch)
        what = (f"per-worker batch {v['batch']}" + (f" as {v['accumulate']} x {a.per_worker_batch}"
                                                     if v["accumulate"] > 1 else "")
                + f", intra-op 1, inter-op {v['inter']}, {a.steps_per_epoch} steps x {a.epochs} epochs (fastest "
                f"after the first); median of {reps_of(a)} interleaved")
        figures.append(Figure(f"scaling_{o}", median(values[f"{a.workers}w:{o}"]), f"{a.workers}_workers",
                              median(values[f"1w:{base_key[o]}"]), "1_worker", "examples/s", ">= 1.8", cores,
                              what))
    report(figures, a.out)
    return figures


if __name__ == "__main__":
    main()
