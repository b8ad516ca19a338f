"""The model: a small CNN for the prepared data set's images, built with ``tf_keras`` (Keras 2).

``tf_keras`` rather than Keras 3: Keras 3's ``fit`` breaks under multi-worker strategies
(keras-team/keras#20585).
"""

from __future__ import annotations

import tensorflow as tf
import tf_keras

from tfk8s.core.data_format import DatasetMetadata

INPUT_NAME = "image"
OUTPUT_NAME = "probabilities"


class OneAllReduceModel(tf_keras.Model):
    """A tf-keras model whose training step makes ONE collective under ``MultiWorkerMirroredStrategy``: the
    gradients and the step's metrics are all-reduced together, instead of Keras' gradient all-reduce plus one
    all-reduce per returned metric (``distribute_reduction_method="auto"`` sums every logged value across the
    workers, each a separate collective: 3 per step with loss and accuracy).

    Every collective costs a round trip between the workers (1.3 ms for 4 KB between two idle local
    processes, TF 2.21) and makes them wait for each other: on 2 local workers with per-worker batch 256,
    ``bench/worker_scaling.py`` measured ``default`` against ``keras_step`` at +23% in one run and +1% in
    another (2 cores, quiet; the spread is the machine's noise). The returned metrics are the mean of the
    workers' running results, the same on every worker (so a NaN loss stops every worker at the same step), and
    ``fit``'s epoch-end values are Keras' own aggregated metrics as before. Gradients are summed in float32 as
    Keras does (the loss is already scaled by ``1 / num_replicas_in_sync``).

    Under any other strategy (one process, ``ParameterServerStrategy``) the step is Keras' own.
    """

    def train_step(self, data):
        ctx = tf.distribute.get_replica_context()
        if not (isinstance(self.distribute_strategy, tf.distribute.MultiWorkerMirroredStrategy)
                and ctx is not None and ctx.num_replicas_in_sync > 1):
            return super().train_step(data)
        x, y, sample_weight = tf_keras.utils.unpack_x_y_sample_weight(data)
        with tf.GradientTape() as tape:
            y_pred = self(x, training=True)
            loss = self.compute_loss(x, y, y_pred, sample_weight)
        variables = self.trainable_variables
        grads = tape.gradient(loss, variables)
        results = self.compute_metrics(x, y, y_pred, sample_weight)
        names = sorted(results)
        local = tf.stack([tf.cast(results[k], tf.float32) for k in names])
        *summed, total = ctx.all_reduce(tf.distribute.ReduceOp.SUM, [*grads, local])
        self.optimizer.apply_gradients(zip(summed, variables, strict=True), skip_gradients_aggregation=True)
        mean = total / ctx.num_replicas_in_sync
        return {k: mean[i] for i, k in enumerate(names)}

    def make_train_function(self, force=False):
        if isinstance(self.distribute_strategy, tf.distribute.MultiWorkerMirroredStrategy):
            self.distribute_reduction_method = "first"  # the step's metrics are all-reduced already
        return super().make_train_function(force=force)


def build_model(
    metadata: DatasetMetadata,
    learning_rate: float,
    *,
    filters: tuple[int, int] = (16, 32),
    dense_units: int = 256,
    decay_steps: int | None = None,
    steps_per_execution: int = 1,
) -> tf_keras.Model:
    """A compiled CNN classifier for ``metadata``'s images and classes.

    Architecture: uint8 input ``[B, H, W, C]`` -> rescale to ``[0, 1]`` floats -> Conv 3x3 (``filters[0]``,
    ReLU) -> max-pool 2 -> Conv 3x3 (``filters[1]``, ReLU) -> max-pool 2 -> flatten -> dense (``dense_units``,
    ReLU) -> dense ``num_classes`` softmax. With the defaults and 28x28x1 images: 212k parameters and 0.86 M
    multiply-adds per image, cheap enough for CPU-only multi-worker training (the wide dense layer costs
    little compute and buys accuracy); 0.985-0.987 MNIST test accuracy after 2 epochs with the trainer's
    defaults.

    Because the rescaling is inside the model, the SavedModel's ``serving_default`` signature takes the raw
    ``uint8 [None, H, W, C]`` images (input ``image``) and returns class probabilities
    ``float32 [None, num_classes]`` (output ``probabilities``).

    ``steps_per_execution``: training steps per call of the compiled step function (Keras' ``compile``);
    more cut the per-step dispatch cost, which under MultiWorkerMirroredStrategy also delays every all-reduce
    (``bench/worker_scaling.py``); the arithmetic is unchanged.

    A :class:`OneAllReduceModel` (one collective per training step under MultiWorkerMirroredStrategy),
    compiled with Adam, sparse categorical cross-entropy on integer labels ``[B]`` and the ``accuracy`` metric.
    The learning rate is ``learning_rate`` throughout, or, with ``decay_steps``, cosine-decayed from
    ``learning_rate`` to 0 over ``decay_steps`` optimizer steps (global steps under a strategy). Call it under ``strategy.scope()`` for distributed training.

    Raises:
        ValueError: if the metadata's images are not 3-D uint8, it has fewer than 2 classes, or
            ``learning_rate <= 0``.
    """
    if len(metadata.image_shape) != 3 or metadata.image_dtype != "uint8":
        raise ValueError(f"expected uint8 (H, W, C) images, metadata says {metadata.image_dtype} "
                         f"{metadata.image_shape}")
    if metadata.num_classes < 2:
        raise ValueError(f"need at least 2 classes, metadata says {metadata.num_classes}")
    if not learning_rate > 0:
        raise ValueError(f"learning_rate must be > 0, got {learning_rate}")

    layers = tf_keras.layers
    inputs = tf_keras.Input(shape=metadata.image_shape, dtype="uint8", name=INPUT_NAME)
    x = layers.Rescaling(1.0 / 255)(inputs)  # casts uint8 -> float32
    x = layers.Conv2D(filters[0], 3, activation="relu")(x)
    x = layers.MaxPooling2D()(x)
    x = layers.Conv2D(filters[1], 3, activation="relu")(x)
    x = layers.MaxPooling2D()(x)
    x = layers.Flatten()(x)
    x = layers.Dense(dense_units, activation="relu")(x)
    outputs = layers.Dense(metadata.num_classes, activation="softmax", name=OUTPUT_NAME)(x)
    model = OneAllReduceModel(inputs, outputs, name=f"{metadata.dataset}_cnn")
    lr = learning_rate
    if decay_steps:
        lr = tf_keras.optimizers.schedules.CosineDecay(learning_rate, decay_steps=decay_steps)
    model.compile(
        optimizer=tf_keras.optimizers.Adam(lr),
        loss=tf_keras.losses.SparseCategoricalCrossentropy(),
        metrics=["accuracy"],
        steps_per_execution=steps_per_execution,
    )
    return model
