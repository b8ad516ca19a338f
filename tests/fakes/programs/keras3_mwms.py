"""Keras 3's fit under MultiWorkerMirroredStrategy, which fails (keras-team/keras#20585): with TF 2.21 and Keras 3
it raises ``ValueError: Attempt to convert a value (PerReplica:{...}) with an unsupported type`` whose message is a
repr of the batch, a hundred lines. tfk8s's failure message names the fix: tf-keras."""

import os

os.environ.pop("TF_USE_LEGACY_KERAS", None)  # Keras 3, as a program written for it would use

import keras
import numpy as np
import tensorflow as tf

strategy = tf.distribute.MultiWorkerMirroredStrategy()
with strategy.scope():
    model = keras.Sequential([keras.Input((28, 28)), keras.layers.Flatten(), keras.layers.Dense(10)])
    model.compile(optimizer="adam", loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
x, y = np.random.rand(512, 28, 28).astype("float32"), np.random.randint(0, 10, 512)
model.fit(tf.data.Dataset.from_tensor_slices((x, y)).batch(64).repeat(), epochs=2, steps_per_epoch=4)
model.export(os.environ.get("TFK8S_MODEL_DIR", "saved_model"))
