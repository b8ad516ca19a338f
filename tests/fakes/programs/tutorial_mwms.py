"""A user's program as a new user writes it from TensorFlow's "Multi-worker training with Keras" tutorial
(tensorflow.org/tutorials/distribute/multi_worker_with_keras): MultiWorkerMirroredStrategy from TF_CONFIG,
model.fit, model.save on every worker. It knows nothing of tfk8s but TFK8S_MODEL_DIR (where to save) and takes
its data folder as a flag (``--data_dir {data_dir}`` in the command). Unlike the built-in trainer: a
flattened, [0, 1]-scaled float input and a dense model, and its own TFRecord parsing.

    python tests/fakes/programs/tutorial_mwms.py --data_dir DIR [--epochs 1] [--steps_per_epoch 20]
"""

import argparse
import glob
import json
import os

import tensorflow as tf

p = argparse.ArgumentParser()
p.add_argument("--data_dir", required=True)
p.add_argument("--epochs", type=int, default=1)
p.add_argument("--steps_per_epoch", type=int, default=20)
p.add_argument("--per_worker_batch", type=int, default=32)
args = p.parse_args()

tf_config = json.loads(os.environ["TF_CONFIG"])
num_workers = len(tf_config["cluster"]["worker"])
strategy = tf.distribute.MultiWorkerMirroredStrategy()


def parse(record):
    ex = tf.io.parse_single_example(record, {"image": tf.io.FixedLenFeature([], tf.string),
                                             "label": tf.io.FixedLenFeature([], tf.int64)})
    image = tf.cast(tf.io.decode_raw(ex["image"], tf.uint8), tf.float32) / 255.0  # flattened, 784 floats
    return tf.reshape(image, [784]), ex["label"]


def dataset(global_batch):
    files = sorted(glob.glob(os.path.join(args.data_dir, "train-*.tfrecord")))
    return (tf.data.TFRecordDataset(files).map(parse).shuffle(1000).repeat().batch(global_batch))


with strategy.scope():
    model = tf.keras.Sequential([
        tf.keras.layers.Input(shape=(784,)),
        tf.keras.layers.Dense(128, activation="relu"),
        tf.keras.layers.Dense(10),
    ])
    model.compile(loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  optimizer=tf.keras.optimizers.SGD(learning_rate=0.1), metrics=["accuracy"])

model.fit(dataset(args.per_worker_batch * num_workers), epochs=args.epochs, steps_per_epoch=args.steps_per_epoch)

# The tutorial's rule: every worker saves (the collective ops in save need them all), only the chief's copy
# is kept. tfk8s gives each worker its own TFK8S_MODEL_DIR and keeps the coordinator's.
model.save(os.environ["TFK8S_MODEL_DIR"])
print("saved to", os.environ["TFK8S_MODEL_DIR"], flush=True)
