"""Benchmark 1, trainer overhead: the built-in trainer (one process) vs a plain tf-keras ``model.fit``.

    python bench/trainer_overhead.py [--examples 0] [--epochs 2] [--batch-size 512] [--threads CORES] [--reps 3]

Both train the same model (``trainer.model.build_model``) on the same training examples with the same global
batch, epochs and TensorFlow threads (intra- and inter-op): the trainer from its TFRecord shards through its
``tf.data`` pipeline with its callbacks (backup, checkpoint per epoch, progress, TensorBoard scalars); the
baseline from NumPy arrays in memory with ``model.fit(x, y)`` and no callbacks. Each side is its own process
and reports examples/sec over all of ``fit`` (start-up excluded). Repetitions alternate the two.

Figures: ``trainer_overhead = trainer / model.fit`` examples/sec (goal >= 0.95), and with ``--breakdown`` (the
default in ``make bench``) the same ratio for the trainer with one callback left out (``--callbacks`` of
``trainer.task``): ``trainer_overhead_without_<callback>`` for backup, checkpoints, tensorboard and progress
(the per-batch NaN check and progress file), and ``trainer_overhead_without_callbacks`` (``--callbacks none``):
what is left is the input pipeline and the trainer's own set-up around ``fit``. A callback's cost is the
difference between its figure and ``trainer_overhead``.
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

# the callbacks left out in turn (trainer.task --callbacks; "progress" also drops the NaN check, the same
# per-batch callback), then all of them
LEFT_OUT = ("backup", "checkpoints", "tensorboard", "progress", "callbacks")


def main(argv: list[str] | None = None) -> list[Figure]:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--examples", type=int, default=0, help="training examples (0: all 60,000)")
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--batch-size", type=int, default=512)
    p.add_argument("--threads", type=int, default=usable_cores(), help="intra- and inter-op threads, both sides")
    p.add_argument("--breakdown", action=argparse.BooleanOptionalAction, default=True,
                   help="also run the trainer with each callback left out (default: yes; smoke: no)")
    common_args(p)
    a = p.parse_args(argv)
    if a.smoke:
        a.examples, a.epochs, a.batch_size = 1024, 1, 256
    data = prepared_mnist(a.cache_dir, a.examples, 4)
    with tempfile.TemporaryDirectory(prefix="bench-overhead-") as tmp:
        runs = iter(range(1000))

        def trainer(leave_out: str = "") -> float:
            from trainer.task import CALLBACKS

            kept = [c for c in CALLBACKS if c != leave_out and not (leave_out == "progress" and c == "stop_on_nan")]
            extra = ["--callbacks", "none" if leave_out == "callbacks" else ",".join(kept)]
            summary = run_trainer(data, Path(tmp) / f"t{next(runs)}", epochs=a.epochs, batch_size=a.batch_size,
                                  threads=a.threads, extra=extra)
            return examples_per_sec(summary)

        def plain() -> float:
            out = run_python(["-m", "bench.procs", "plain-fit", "--data-dir", str(data), "--epochs", str(a.epochs),
                              "--batch-size", str(a.batch_size), "--threads", str(a.threads)])
            return last_json(out)["examples_per_sec"]

        variants = {"trainer": trainer, "model.fit": plain}
        left_out = LEFT_OUT if a.breakdown and not a.smoke else ()
        for name in left_out:
            variants[f"without_{name}"] = lambda name=name: trainer(name)
        values = interleaved(variants, reps_of(a))
    reps = reps_of(a)
    conf = (f"{a.examples or 60000} examples x {a.epochs} epochs, batch {a.batch_size}, {a.threads} threads; "
            f"median of {reps} interleaved")
    cores, base = min(a.threads, usable_cores()), median(values["model.fit"])
    figures = [Figure("trainer_overhead", median(values["trainer"]), "trainer", base,
                      "model.fit", "examples/s", ">= 0.95", cores, conf)]
    for name in left_out:
        figures.append(Figure(f"trainer_overhead_without_{name}", median(values[f"without_{name}"]),
                              f"trainer_without_{name}", base, "model.fit", "examples/s", "", cores,
                              f"--callbacks without {name}" + (" (none at all)" if name == "callbacks" else "")
                              + f"; {conf}"))
    report(figures, a.out)
    return figures


if __name__ == "__main__":
    main()
