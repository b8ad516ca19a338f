"""Benchmark 3, input headroom: the prepared shards' ``tf.data`` pipeline alone vs the trainer's consumption.

    python bench/input_headroom.py [--examples 0] [--batch-size 512] [--threads CORES] [--reps 3]

- input alone: ``tfk8s.runtime.shards.make_dataset`` of the training split exactly as the trainer builds it
  (shuffled, repeated, parsed, batched, prefetched), iterated for ``--steps`` batches after 10 warm-up
  batches, nothing else running in the process;
- trainer: the built-in trainer, one process, the same batch and threads, its examples/sec over ``fit``.

Figure: ``input_headroom = input alone / trainer`` examples/sec. Goal >= 5 (the input pipeline could feed
five such trainers; below 1 it would be the bottleneck).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import (
    Figure,
    common_args,
    examples_per_sec,
    interleaved,
    last_json,
    median,
    prepared_mnist,
    report,
    reps_of,
    run_python,
    run_trainer,
    usable_cores,
)


def main(argv: list[str] | None = None) -> list[Figure]:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--examples", type=int, default=0, help="training examples (0: all 60,000)")
    p.add_argument("--epochs", type=int, default=1, help="trainer epochs")
    p.add_argument("--batch-size", type=int, default=512)
    p.add_argument("--steps", type=int, default=300, help="batches the input pipeline alone is timed over")
    p.add_argument("--threads", type=int, default=usable_cores())
    common_args(p)
    a = p.parse_args(argv)
    if a.smoke:
        a.examples, a.epochs, a.batch_size, a.steps = 1024, 1, 256, 20
    data = prepared_mnist(a.cache_dir, a.examples, 4)
    with tempfile.TemporaryDirectory(prefix="bench-input-") as tmp:
        runs = iter(range(1000))

        def pipeline() -> float:
            out = run_python(["-m", "bench.procs", "input", "--data-dir", str(data), "--batch-size",
                              str(a.batch_size), "--steps", str(a.steps), "--threads", str(a.threads)])
            return last_json(out)["examples_per_sec"]

        def trainer() -> float:
            summary = run_trainer(data, Path(tmp) / f"t{next(runs)}", epochs=a.epochs, batch_size=a.batch_size,
                                  threads=a.threads)
            return examples_per_sec(summary)

        values = interleaved({"input": pipeline, "trainer": trainer}, reps_of(a))
    figures = [Figure("input_headroom", median(values["input"]), "input_alone", median(values["trainer"]),
                      "trainer", "examples/s", ">= 5", min(a.threads, usable_cores()),
                      f"batch {a.batch_size}, {a.threads} threads, input timed over {a.steps} batches; median of "
                      f"{reps_of(a)} interleaved")]
    report(figures, a.out)
    return figures


if __name__ == "__main__":
    main()
