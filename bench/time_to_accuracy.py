"""Benchmark 6, time to accuracy: ``make run``'s training configuration with 2 workers and with 1.

    python bench/time_to_accuracy.py [--workers 2] [--reps 1] [--target 0.985]

Both runs train the built-in trainer through the local launcher (``tfk8s.steps.launch_training.build_job`` / ``run_job``,
what the launch step runs) with the pipeline's defaults (``tfk8s.steps.launch_training``: epochs, global batch, learning
rate, the trainer's default threads) on full MNIST prepared as the pipeline does (4 shards per worker). The
wall time is the launch step's job, launch to verdict (replica start-up included); the test accuracy is that
of the SavedModel on the 10,000 test examples (``tfk8s.steps.evaluation.evaluate_saved_model``).

Figures: ``time_to_accuracy = 2-worker wall / 1-worker wall`` (goal <= 1: two workers no slower than one;
below 1 they are faster), each valid only when its run reached ``--target`` (said in the figure's note), and
``accuracy_<N>w = test accuracy / target`` (goal >= 1).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import (
    Figure,
    common_args,
    interleaved,
    median,
    prepared_mnist,
    report,
    reps_of,
    usable_cores,
)


def train_and_evaluate(data: Path, out: Path, workers: int, epochs: int, batch: int, lr: float,
                       max_examples: int) -> tuple[float, float]:
    """One job of ``workers`` workers with these settings; returns (job wall seconds, test accuracy)."""
    from tfk8s.core.builtin_trainer import trainer_args
    from tfk8s.core.cluster import ReplicaCounts
    from tfk8s.launcher.backends import get_backend
    from tfk8s.steps.evaluation import evaluate_saved_model
    from tfk8s.steps.launch_training import build_job, run_job

    local = get_backend("local")
    job = build_job(name=f"tta-{workers}w", counts=ReplicaCounts(worker=workers),
                    args=trainer_args(data, out, epochs, batch, lr, max_examples), backend=local, train_dir=out,
                    data_dir=data)
    t0 = time.monotonic()
    outcome = run_job(job, local, out, log_sink=lambda _line: None)
    wall = time.monotonic() - t0
    return wall, evaluate_saved_model(outcome.saved_model_dir, data).accuracy


def main(argv: list[str] | None = None) -> list[Figure]:
    from tfk8s.core.builtin_trainer import DEFAULT_BATCH_SIZE, DEFAULT_EPOCHS, DEFAULT_LEARNING_RATE

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--target", type=float, default=0.985, help="test accuracy to reach")
    p.add_argument("--epochs", type=int, default=DEFAULT_EPOCHS)
    p.add_argument("--batch-size", type=int, default=DEFAULT_BATCH_SIZE, help="global batch, both runs")
    p.add_argument("--learning-rate", type=float, default=DEFAULT_LEARNING_RATE)
    p.add_argument("--examples", type=int, default=0, help="training examples (0: all 60,000)")
    common_args(p, reps=1)
    a = p.parse_args(argv)
    if a.smoke:
        a.examples, a.epochs = 1024, 1
    import tensorflow as tf  # noqa: F401 - the evaluation runs here; imported once, before any timing

    data = prepared_mnist(a.cache_dir, a.examples, 4 * a.workers)
    accuracy: dict[int, list[float]] = {1: [], a.workers: []}
    with tempfile.TemporaryDirectory(prefix="bench-tta-") as tmp:
        runs = iter(range(1000))

        def run(n: int) -> float:
            wall, acc = train_and_evaluate(data, Path(tmp) / f"r{next(runs)}", n, a.epochs, a.batch_size,
                                           a.learning_rate, a.examples)
            accuracy[n].append(acc)
            print(f"  {n} worker(s): {wall:.1f}s, test accuracy {acc:.4f}", file=sys.stderr, flush=True)
            return wall

        walls = interleaved({f"{a.workers}w": lambda: run(a.workers), "1w": lambda: run(1)}, reps_of(a))
    cores = usable_cores()
    conf = f"epochs {a.epochs}, global batch {a.batch_size}, lr {a.learning_rate:g}; median of {reps_of(a)}"
    reached = {n: min(accs) >= a.target for n, accs in accuracy.items()}
    figures = [Figure("time_to_accuracy", median(walls[f"{a.workers}w"]), f"{a.workers}_workers_wall",
                      median(walls["1w"]), "1_worker_wall", "s", "<= 1", cores,
                      f"target {a.target} reached: {a.workers}w {reached[a.workers]}, 1w {reached[1]}; {conf}")]
    for n in (a.workers, 1):
        figures.append(Figure(f"accuracy_{n}w", median(accuracy[n]), "test_accuracy", a.target, "target", "accuracy",
                              ">= 1", cores, conf))
    report(figures, a.out)
    return figures


if __name__ == "__main__":
    main()
