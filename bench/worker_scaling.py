"""Benchmark: training throughput of N local TensorFlow workers (MultiWorkerMirroredStrategy) against one.

    python bench/worker_scaling.py [--workers 2] [--examples 12000] [--epochs 2]

Prepares a real MNIST subset once, trains it with 1 worker and with N workers through the local backend (the
same launcher and trainer as ``make run``), and prints each run's examples/sec (as the trainer measured it,
all epochs) and wall time, and the ratios N-worker / 1-worker. On a machine with fewer cores than workers the
ratio is expected below 1: the workers then share the cores and pay for the all-reduce; the number says what
the collective costs here. Nothing is asserted: this prints measurements.
"""

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tfk8s.cluster import ReplicaCounts
from tfk8s.dataset import default_tfds_data_dir, prepare_dataset
from tfk8s.training import DEFAULT_BATCH_SIZE, DEFAULT_LEARNING_RATE, build_job, run_job, trainer_args


def train(data_dir: Path, out: Path, workers: int, epochs: int, batch: int) -> tuple[dict, float]:
    """Train on ``data_dir`` with ``workers`` local workers; returns (training summary, job wall time in s)."""
    job = build_job(name=f"bench-{workers}w", counts=ReplicaCounts(worker=workers),
                    args=trainer_args(data_dir, out, epochs, batch, DEFAULT_LEARNING_RATE), backend="local")
    t0 = time.monotonic()
    outcome = run_job(job, "local", out, log_sink=lambda _line: None)
    return outcome.summary, time.monotonic() - t0


def main() -> None:
    """Prepare the subset once, train with 1 and N workers, print both and their ratios."""
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--examples", type=int, default=12000, help="training examples (a real MNIST subset)")
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--batch-size", type=int, default=0,
                   help=f"global batch (default: {DEFAULT_BATCH_SIZE}, rounded down to a multiple of --workers)")
    a = p.parse_args()
    a.batch_size = a.batch_size or DEFAULT_BATCH_SIZE - DEFAULT_BATCH_SIZE % a.workers
    if a.batch_size % a.workers:
        p.error(f"--batch-size {a.batch_size} must be a multiple of --workers {a.workers} (the global batch is split)")
    with tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp) / "data"
        prepare_dataset("mnist", data, tfds_data_dir=default_tfds_data_dir(), num_shards=4 * a.workers,
                        max_examples=a.examples)
        rows = {}
        for n in (1, a.workers):
            summary, wall = train(data, Path(tmp) / f"train-{n}", n, a.epochs, a.batch_size)
            rows[n] = {"examples_per_sec": summary["examples_per_sec"], "job_wall_s": wall,
                       "final_accuracy": summary["final_accuracy"]}
            print(f"{n} worker(s): {summary['examples_per_sec']:.0f} examples/s, job wall {wall:.1f} s, "
                  f"train accuracy {summary['final_accuracy']:.4f}", flush=True)
    one, many = rows[1], rows[a.workers]
    print(json.dumps({
        "workers": a.workers,
        "throughput_ratio": round(many["examples_per_sec"] / one["examples_per_sec"], 3),
        "wall_time_ratio": round(many["job_wall_s"] / one["job_wall_s"], 3),
    }))


if __name__ == "__main__":
    main()
