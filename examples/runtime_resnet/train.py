"""A small residual network trained with tfk8s.runtime: the strategy from TF_CONFIG, the prepared shards split
among the workers, the standard callbacks (resume after a restart, per-epoch checkpoints, TensorBoard scalars,
progress, stop on a NaN loss), saving on every worker and the metrics the pipeline shows.

Run it on 2 local workers through the whole pipeline:

    make run ARGS="--param workers=2 --param command='python examples/runtime_resnet/train.py --epochs 2'"

Its model takes the data set's uint8 images (the rescaling is its first layer), so the pipeline's built-in
evaluation runs on it and the gate decides on the test accuracy. Alone: ``TFK8S_DATA_DIR=<prepared data>
python examples/runtime_resnet/train.py`` (outputs under ./tfk8s-output). In an image:

    FROM ghcr.io/tfk8s/tfk8s:0.1.0
    COPY train.py /home/tfk8s/train.py
    # then: --param image=<your image> --param command='python /home/tfk8s/train.py --epochs 2'
"""

import argparse
import os
import time

os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")  # tf-keras: Keras 3's fit breaks under MWMS (keras#20585)

from tfk8s import runtime


def build_model(meta, learning_rate, decay_steps):
    """uint8 [B, H, W, C] -> class probabilities: a stem convolution, two residual blocks (conv-ReLU-conv plus
    the shortcut, then ReLU), a linear classifier on the flattened features (22k parameters)."""
    import tf_keras

    layers = tf_keras.layers
    inputs = tf_keras.Input(shape=meta.image_shape, dtype="uint8", name="image")
    x = layers.Rescaling(1.0 / 255)(inputs)
    x = layers.Conv2D(16, 3, padding="same", activation="relu")(x)
    x = layers.MaxPooling2D()(x)
    for filters in (16, 32):
        shortcut = layers.Conv2D(filters, 1)(x) if x.shape[-1] != filters else x
        y = layers.Conv2D(filters, 3, padding="same", activation="relu")(x)
        y = layers.Conv2D(filters, 3, padding="same")(y)
        x = layers.MaxPooling2D()(layers.ReLU()(layers.Add()([shortcut, y])))
    x = layers.Flatten()(x)
    outputs = layers.Dense(meta.num_classes, activation="softmax", name="probabilities")(x)
    model = tf_keras.Model(inputs, outputs, name="small_resnet")
    schedule = tf_keras.optimizers.schedules.CosineDecay(learning_rate, decay_steps=max(1, decay_steps))
    model.compile(optimizer=tf_keras.optimizers.Adam(schedule),
                  loss=tf_keras.losses.SparseCategoricalCrossentropy(), metrics=["accuracy"])
    return model


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--batch_size", type=int, default=256, help="global batch (all workers together)")
    parser.add_argument("--steps_per_epoch", type=int, default=0, help="0: one pass over the training split")
    parser.add_argument("--max_examples", type=int, default=0, help="0: the whole training split")
    parser.add_argument("--learning_rate", type=float, default=3e-3)
    args = parser.parse_args()
    start = time.perf_counter()

    strategy = runtime.strategy()
    meta = runtime.metadata()
    examples = min(args.max_examples or meta.splits["train"].num_examples, meta.splits["train"].num_examples)
    steps = args.steps_per_epoch or max(1, examples // args.batch_size)
    train = runtime.distribute(runtime.dataset("train", batch_size=args.batch_size, max_examples=examples), strategy)
    with strategy.scope():
        model = build_model(meta, args.learning_rate, args.epochs * steps)
    history = model.fit(train, epochs=args.epochs, steps_per_epoch=steps, verbose=0,
                        callbacks=runtime.callbacks(batch_size=args.batch_size))
    runtime.save(model)  # on every worker; a non-coordinator's copy is thrown away
    times = runtime.epoch_times()
    runtime.report({"accuracy": history.history["accuracy"][-1], "loss": history.history["loss"][-1],
                    "examples_per_sec": len(times) * steps * args.batch_size / max(sum(times), 1e-9),
                    "wall_time_s": time.perf_counter() - start, "epochs": args.epochs})


if __name__ == "__main__":
    main()
    runtime.finish(0)  # skips the interpreter's teardown (tfk8s.runtime.finish)
