"""A custom training loop under ParameterServerStrategy, as in TensorFlow's "Parameter server training" tutorial:
a ``ClusterCoordinator`` on the chief schedules steps on the workers, each worker reads its own dataset
(``create_per_worker_dataset``), the variables live on the ps. tfk8s.runtime supplies the role (``strategy()``
serves on a ps or worker and never returns there), the data, progress and the metrics.

Run it with a chief, 2 workers and a ps through the whole pipeline:

    make run ARGS="--param chief=1 --param workers=2 --param ps=1 --param command='python examples/pss_custom_loop/train.py --epochs 2'"

Every replica runs this same command and finds its role in TF_CONFIG; the launcher stops the ps and workers
once the chief has saved and exited. The model takes the data set's uint8 images, so the built-in evaluation
runs on it. In an image:

    FROM ghcr.io/tfk8s/tfk8s:0.1.0
    COPY train.py /home/tfk8s/train.py
    # then: --param image=<your image> --param command='python /home/tfk8s/train.py --epochs 2'
"""

import argparse
import os
import time

os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")  # tf-keras for the layers (Keras 2)

from tfk8s import runtime


def build_model(meta):
    """uint8 images -> class probabilities: rescale, two convolutions, a dense layer (a Keras functional model,
    so that saving it gives a ``serving_default`` signature)."""
    import tf_keras

    layers = tf_keras.layers
    inputs = tf_keras.Input(shape=meta.image_shape, dtype="uint8", name="image")
    x = layers.Rescaling(1.0 / 255)(inputs)
    x = layers.Conv2D(16, 5, strides=2, activation="relu")(x)
    x = layers.Conv2D(32, 3, strides=2, activation="relu")(x)
    x = layers.Flatten()(x)
    x = layers.Dense(64, activation="relu")(x)
    outputs = layers.Dense(meta.num_classes, activation="softmax", name="probabilities")(x)
    return tf_keras.Model(inputs, outputs, name="pss_cnn")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--steps_per_epoch", type=int, default=0, help="0: train examples / batch size")
    parser.add_argument("--batch_size", type=int, default=128, help="examples per step (one worker runs a step)")
    parser.add_argument("--learning_rate", type=float, default=3e-3, help="cosine-decayed to 0 over the steps")
    args = parser.parse_args()
    start = time.perf_counter()

    strategy = runtime.strategy()  # a ps or worker serves in here until the launcher stops it
    import tensorflow as tf
    import tf_keras

    coordinator = tf.distribute.experimental.coordinator.ClusterCoordinator(strategy)
    meta = runtime.metadata()
    steps = args.steps_per_epoch or max(1, meta.splits["train"].num_examples // args.batch_size)
    with strategy.scope():  # the variables are created on the ps
        model = build_model(meta)
        schedule = tf_keras.optimizers.schedules.CosineDecay(args.learning_rate, decay_steps=args.epochs * steps)
        optimizer = tf_keras.optimizers.Adam(schedule)
        train_loss = tf_keras.metrics.Mean("loss")
        train_accuracy = tf_keras.metrics.SparseCategoricalAccuracy("accuracy")
    loss_fn = tf_keras.losses.SparseCategoricalCrossentropy(reduction=tf_keras.losses.Reduction.NONE)

    def dataset_fn(input_context):  # runs on each worker: its own shuffled, repeated copy of the training data
        return runtime.dataset("train", batch_size=args.batch_size, input_context=input_context)

    @tf.function
    def per_worker_dataset_fn():
        return strategy.distribute_datasets_from_function(dataset_fn)

    per_worker_iterator = iter(coordinator.create_per_worker_dataset(per_worker_dataset_fn))

    @tf.function
    def step_fn(iterator):
        def replica_fn(images, labels):
            with tf.GradientTape() as tape:
                probabilities = model(images, training=True)
                loss = tf.nn.compute_average_loss(loss_fn(labels, probabilities),
                                                  global_batch_size=args.batch_size)
            gradients = tape.gradient(loss, model.trainable_variables)
            optimizer.apply_gradients(zip(gradients, model.trainable_variables))
            train_loss.update_state(loss)
            train_accuracy.update_state(labels, probabilities)
            return loss

        images, labels = next(iterator)
        return strategy.run(replica_fn, args=(images, labels))

    times = []
    for epoch in range(1, args.epochs + 1):
        t0 = time.perf_counter()
        train_loss.reset_states()
        train_accuracy.reset_states()
        for step in range(steps):
            coordinator.schedule(step_fn, args=(per_worker_iterator,))  # to whichever worker is free
            if step % 20 == 19:  # steps done so far: the optimizer's step counter, read from the ps
                runtime.progress(epoch=epoch, epochs=args.epochs, step=int(optimizer.iterations.numpy()),
                                 steps=args.epochs * steps)
        coordinator.join()  # every scheduled step of the epoch has run
        times.append(time.perf_counter() - t0)
        loss, accuracy = float(train_loss.result()), float(train_accuracy.result())
        rate = steps * args.batch_size / times[-1]
        print(f"epoch {epoch}/{args.epochs}: loss={loss:.4f} accuracy={accuracy:.4f} examples/sec={rate:.0f} "
              f"time={times[-1]:.1f}s", flush=True)
        runtime.progress(epoch=epoch, epochs=args.epochs, step=epoch * steps, steps=args.epochs * steps,
                         examples_per_sec=rate, loss=loss, force=True)

    runtime.save(model)  # the coordinator reads the variables from the ps
    runtime.progress("done", force=True, epoch=args.epochs, epochs=args.epochs,
                     step=int(optimizer.iterations.numpy()), steps=args.epochs * steps, loss=loss)
    runtime.report({"accuracy": accuracy, "loss": loss, "epochs": args.epochs,
                    "examples_per_sec": args.epochs * steps * args.batch_size / sum(times),
                    "wall_time_s": time.perf_counter() - start})


if __name__ == "__main__":
    main()
