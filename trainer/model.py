"""The model: a small CNN for the prepared data set's images, built with ``tf_keras`` (Keras 2).

``tf_keras`` rather than Keras 3: Keras 3's ``fit`` breaks under multi-worker strategies
(keras-team/keras#20585).
"""

from __future__ import annotations

import tf_keras

from tfk8s.dataset import DatasetMetadata

INPUT_NAME = "image"
OUTPUT_NAME = "probabilities"


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

    Compiled with Adam, sparse categorical cross-entropy on integer labels ``[B]`` and the ``accuracy`` metric.
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
    model = tf_keras.Model(inputs, outputs, name=f"{metadata.dataset}_cnn")
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
