"""The measured programs the benchmarks start as processes (each prints one JSON line at the end).

    python -m bench.procs plain-fit  --data-dir D --epochs E --batch-size B --threads T
    python -m bench.procs input      --data-dir D --batch-size B --threads T --steps S
    python -m bench.procs mwms       --data-dir D --per-worker-batch B --epochs E [collective options]
    python -m bench.procs evaluate   --saved-model M --data-dir D

- ``plain-fit``: the baseline of the trainer-overhead figure: the same model (``trainer.model.build_model``)
  fitted with plain ``tf_keras`` ``model.fit(x, y)`` on the training split loaded into memory as NumPy arrays.
- ``input``: the trainer's input pipeline alone (``tfk8s.runtime.shards.make_dataset``, as the trainer builds it),
  iterated without training.
- ``mwms``: a prototype multi-worker trainer: the strategy of ``tfk8s.runtime.strategy`` (collective options
  ``bytes_per_pack``, RING/AUTO) with the trainer's model and input pipeline, plus what the built-in trainer
  does not offer: gradient accumulation over micro-batches (one all-reduce per ``--accumulate``
  micro-batches), ``steps_per_execution``, inter-op threads (overlap of the all-reduce with the backward
  pass), or no cluster at all (``--independent``). It reads TF_CONFIG like the trainer; run it through the
  local launcher.
- ``evaluate``: test accuracy of a SavedModel (``tfk8s.steps.evaluation.evaluate_saved_model``).

Threads are set before anything runs (``--threads`` sets intra- and inter-op alike unless given apart).
"""

from __future__ import annotations

import os

os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")

import argparse
import json
import math
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))


def _threads(tf, intra: int, inter: int) -> None:
    if intra:
        tf.config.threading.set_intra_op_parallelism_threads(intra)
    if inter:
        tf.config.threading.set_inter_op_parallelism_threads(inter)


def _load_numpy(data_dir: str, split: str):
    import numpy as np

    from tfk8s.runtime.shards import make_dataset

    xs, ys = [], []
    for x, y in make_dataset(data_dir, split, batch_size=4096, shuffle=False, repeat=False, num_workers=1):
        xs.append(x.numpy())
        ys.append(y.numpy())
    return np.concatenate(xs), np.concatenate(ys)


def plain_fit(a: argparse.Namespace) -> dict:
    import tensorflow as tf

    _threads(tf, a.intra or a.threads, a.inter or a.threads)
    from tfk8s.core.data_format import load_metadata
    from trainer.model import build_model

    meta = load_metadata(a.data_dir)
    x, y = _load_numpy(a.data_dir, "train")
    steps = math.ceil(len(x) / a.batch_size)
    model = build_model(meta, a.learning_rate, decay_steps=a.epochs * steps)
    t0 = time.perf_counter()
    model.fit(x, y, batch_size=a.batch_size, epochs=a.epochs, verbose=0, shuffle=True)
    fit_s = time.perf_counter() - t0
    return {"examples_per_sec": a.epochs * len(x) / fit_s, "fit_s": fit_s, "examples": len(x)}


def input_only(a: argparse.Namespace) -> dict:
    import tensorflow as tf

    _threads(tf, a.intra or a.threads, a.inter or a.threads)
    from tfk8s.runtime.shards import make_dataset

    ds = make_dataset(a.data_dir, "train", batch_size=a.batch_size, shuffle=True, repeat=True, num_workers=1)
    it = iter(ds)
    for _ in range(min(10, a.steps)):  # warm-up: files opened, shuffle buffer filled
        next(it)
    t0 = time.perf_counter()
    n = 0
    for _ in range(a.steps):
        images, _labels = next(it)
        n += int(images.shape[0])
    dt = time.perf_counter() - t0
    return {"examples_per_sec": n / dt, "seconds": dt, "examples": n}


def _accumulating_model(tf, tf_keras, base, k: int, learning_rate: float, decay_steps: int):
    """``base``'s layers with a train step that sums the gradients of ``k`` micro-batches and applies (so
    all-reduces, under a strategy) them once."""

    class Accumulating(tf_keras.Model):
        def train_step(self, data):
            x, y = data
            xs, ys = tf.split(x, k), tf.split(y, k)
            total = None
            for i in range(k):
                with tf.GradientTape() as tape:
                    pred = self(xs[i], training=True)
                    loss = self.compiled_loss(ys[i], pred, regularization_losses=self.losses) / k
                grads = tape.gradient(loss, self.trainable_variables)
                total = grads if total is None else [g + h for g, h in zip(total, grads, strict=True)]
                self.compiled_metrics.update_state(ys[i], pred)
            self.optimizer.apply_gradients(zip(total, self.trainable_variables, strict=True))
            return {m.name: m.result() for m in self.metrics}

    model = Accumulating(base.inputs, base.outputs, name=base.name)
    lr = tf_keras.optimizers.schedules.CosineDecay(learning_rate, decay_steps=decay_steps)
    model.compile(optimizer=tf_keras.optimizers.Adam(lr), loss=tf_keras.losses.SparseCategoricalCrossentropy(),
                  metrics=["accuracy"])
    return model


def _strategy(tf, a: argparse.Namespace, workers: int):
    """The runtime's strategy (``tfk8s.runtime.strategy``: MultiWorkerMirroredStrategy from TF_CONFIG with
    these collective options, after the peers' wait), the default one for a single process."""
    if workers <= 1:
        return tf.distribute.get_strategy()
    from tfk8s import runtime

    return runtime.strategy(communication=a.implementation.upper(), bytes_per_pack=a.bytes_per_pack,
                            intra_op_threads=a.intra or a.threads, inter_op_threads=a.inter or a.threads)


def mwms(a: argparse.Namespace) -> dict:
    import tensorflow as tf

    _threads(tf, a.intra or a.threads, a.inter or a.threads)
    import tf_keras

    from tfk8s.core.cluster import parse_tf_config
    from tfk8s.core.data_format import load_metadata
    from tfk8s.runtime.shards import make_dataset, num_workers_from_tf_config
    from trainer.model import build_model

    _, replica = parse_tf_config(os.environ.get("TF_CONFIG"))
    index = replica.index if replica else 0
    workers = 1 if a.independent else num_workers_from_tf_config()
    strategy = _strategy(tf, a, workers)
    meta = load_metadata(a.data_dir)
    global_batch = a.per_worker_batch * workers
    examples = meta.splits["train"].num_examples
    steps = a.steps_per_epoch or max(1, math.ceil(examples / global_batch))
    ds = make_dataset(a.data_dir, "train", batch_size=global_batch, shuffle=True, repeat=True,
                      num_workers=workers, metadata=meta)
    with strategy.scope():
        model = build_model(meta, a.learning_rate, decay_steps=a.epochs * steps)
        if a.keras_step:
            plain = tf_keras.Model(model.inputs, model.outputs, name=model.name)  # the same layers, Keras' step
            plain.compile(optimizer=model.optimizer, loss=model.loss, metrics=["accuracy"])
            model = plain
        if a.accumulate > 1:
            if a.per_worker_batch % a.accumulate:
                raise SystemExit(f"--per-worker-batch {a.per_worker_batch} must be a multiple of --accumulate")
            model = _accumulating_model(tf, tf_keras, model, a.accumulate, a.learning_rate, a.epochs * steps)
        if a.steps_per_execution > 1:
            model.compile(optimizer=model.optimizer, loss=model.loss, metrics=["accuracy"],
                          steps_per_execution=a.steps_per_execution)
    times: list[float] = []

    class Timer(tf_keras.callbacks.Callback):
        def on_epoch_begin(self, epoch, logs=None):
            self.t0 = time.perf_counter()

        def on_epoch_end(self, epoch, logs=None):
            times.append(time.perf_counter() - self.t0)

    hist = model.fit(ds, epochs=a.epochs, steps_per_epoch=steps, verbose=0, callbacks=[Timer()])
    best = min(times[1:] or times)  # steady state: the first epoch also traces and warms up
    result = {"worker": index, "workers": workers, "epoch_times_s": [round(t, 3) for t in times],
              "examples_per_sec": steps * global_batch / best, "steps_per_epoch": steps,
              "global_batch": global_batch, "accuracy": float(hist.history["accuracy"][-1])}
    if a.out and (index == 0 or a.independent):
        Path(a.out).write_text(json.dumps(result))
    return result


def evaluate(a: argparse.Namespace) -> dict:
    from tfk8s.steps.evaluation import evaluate_saved_model

    r = evaluate_saved_model(a.saved_model, a.data_dir)
    return {"accuracy": r.accuracy, "loss": r.loss}


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m bench.procs", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    for name in ("plain-fit", "input", "mwms", "evaluate"):
        s = sub.add_parser(name)
        s.add_argument("--data-dir", required=True)
        s.add_argument("--threads", type=int, default=0, help="intra- and inter-op threads (0: TF's default)")
        s.add_argument("--intra", type=int, default=0)
        s.add_argument("--inter", type=int, default=0)
        s.add_argument("--learning-rate", type=float, default=6e-3)
        if name == "plain-fit":
            s.add_argument("--epochs", type=int, required=True)
            s.add_argument("--batch-size", type=int, required=True)
        elif name == "input":
            s.add_argument("--batch-size", type=int, required=True)
            s.add_argument("--steps", type=int, required=True)
        elif name == "mwms":
            s.add_argument("--per-worker-batch", type=int, required=True)
            s.add_argument("--epochs", type=int, default=2)
            s.add_argument("--steps-per-epoch", type=int, default=0)
            s.add_argument("--bytes-per-pack", type=int, default=0, help="0: one pack of every gradient")
            s.add_argument("--implementation", choices=("auto", "ring"), default="auto")
            s.add_argument("--accumulate", type=int, default=1, help="micro-batches per all-reduce")
            s.add_argument("--steps-per-execution", type=int, default=1, help="steps per tf.function call")
            s.add_argument("--keras-step", action="store_true",
                           help="Keras' own train step (gradient all-reduce + one all-reduce per logged metric) "
                                "instead of trainer.model.OneAllReduceModel's single collective")
            s.add_argument("--independent", action="store_true",
                           help="ignore TF_CONFIG: every process trains alone (no all-reduce): the ceiling")
            s.add_argument("--out", default="", help="worker 0 (--independent: each; the launcher substitutes {replica_index}) writes "
                           "its JSON result here")
        else:
            s.add_argument("--saved-model", required=True)
    a = p.parse_args(argv)
    fn = {"plain-fit": plain_fit, "input": input_only, "mwms": mwms, "evaluate": evaluate}[a.cmd]
    print(json.dumps(fn(a)), flush=True)


if __name__ == "__main__":
    main()
