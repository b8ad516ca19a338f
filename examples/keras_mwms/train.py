"""Multi-worker Keras training, written the way TensorFlow's tutorial "Multi-worker training with Keras" does it,
and knowing NOTHING of tfk8s but its contract: TF_CONFIG, TFK8S_DATA_DIR (the prepared TFRecord shards and their
metadata.json) and TFK8S_MODEL_DIR (where this worker saves its model). No tfk8s import.

Run it on 2 local workers through the whole pipeline (prepare, launch, export, evaluate):

    make run ARGS="--param workers=2 --param command='python examples/keras_mwms/train.py --epochs 2'"

Its model takes float32 images standardised per image (the preprocessing lives in the input pipeline, as in
the tutorial), so the built-in evaluation, which feeds the data set's uint8 images, reports "not evaluated" with
the reason; the export is versioned all the same. Alone, without tfk8s:

    TFK8S_DATA_DIR=volume/runs/<run id>/data python examples/keras_mwms/train.py --epochs 1

In an image (FROM the project image, which has TensorFlow and tf-keras):

    FROM ghcr.io/tfk8s/tfk8s:0.1.0
    COPY train.py /home/tfk8s/train.py
    # then: --param image=<your image> --param command='python /home/tfk8s/train.py --epochs 2'
"""

import argparse
import json
import os

# Keras 3's fit() breaks under MultiWorkerMirroredStrategy (keras-team/keras#20585): use tf-keras (Keras 2),
# as tf.keras, before TensorFlow is imported. tfk8s sets it for every replica; this covers running alone.
os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")

import tensorflow as tf


def read_metadata(data_dir):
    with open(os.path.join(data_dir, "metadata.json")) as f:
        return json.load(f)


def make_dataset(data_dir, meta, global_batch_size):
    """The training split: TFRecords of raw uint8 image bytes + int64 label (see metadata.json), standardised per
    image, shuffled, repeated. tf.distribute shards it among the workers by file (AUTO policy)."""
    height, width, channels = meta["image_shape"]
    files = [os.path.join(data_dir, name) for name in meta["splits"]["train"]["files"]]
    features = {"image": tf.io.FixedLenFeature([], tf.string), "label": tf.io.FixedLenFeature([], tf.int64)}

    def parse(record):
        example = tf.io.parse_single_example(record, features)
        image = tf.reshape(tf.io.decode_raw(example["image"], tf.uint8), [height, width, channels])
        image = tf.image.per_image_standardization(tf.cast(image, tf.float32))  # zero mean, unit variance
        return image, example["label"]

    return (tf.data.TFRecordDataset(files)
            .map(parse, num_parallel_calls=tf.data.AUTOTUNE)
            .shuffle(5000)
            .repeat()
            .batch(global_batch_size)
            .prefetch(tf.data.AUTOTUNE))


def build_and_compile_model(meta, learning_rate):
    """A different model from the built-in trainer's: a wider MLP with batch normalisation and dropout."""
    model = tf.keras.Sequential([
        tf.keras.layers.InputLayer(input_shape=meta["image_shape"]),
        tf.keras.layers.Flatten(),
        tf.keras.layers.Dense(256, use_bias=False),
        tf.keras.layers.BatchNormalization(),
        tf.keras.layers.ReLU(),
        tf.keras.layers.Dropout(0.2),
        tf.keras.layers.Dense(meta["num_classes"], activation="softmax"),
    ])
    model.compile(optimizer=tf.keras.optimizers.Adam(learning_rate),
                  loss=tf.keras.losses.SparseCategoricalCrossentropy(), metrics=["accuracy"])
    return model


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--steps_per_epoch", type=int, default=0, help="0: one pass over the training split")
    parser.add_argument("--per_worker_batch", type=int, default=128)
    parser.add_argument("--learning_rate", type=float, default=2e-3)
    args = parser.parse_args()

    tf_config = json.loads(os.environ.get("TF_CONFIG") or "{}")
    cluster = tf_config.get("cluster", {})
    num_workers = max(1, len(cluster.get("chief", [])) + len(cluster.get("worker", [])))
    task = tf_config.get("task", {})
    data_dir = os.environ["TFK8S_DATA_DIR"]
    model_dir = os.environ.get("TFK8S_MODEL_DIR", "/tmp/keras_mwms_model")

    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    meta = read_metadata(data_dir)
    global_batch_size = args.per_worker_batch * num_workers
    steps = args.steps_per_epoch or meta["splits"]["train"]["num_examples"] // global_batch_size
    with strategy.scope():
        model = build_and_compile_model(meta, args.learning_rate)
    print(f"{task.get('type', 'chief')}-{task.get('index', 0)}: {num_workers} workers, global batch "
          f"{global_batch_size}, {steps} steps per epoch", flush=True)
    history = model.fit(make_dataset(data_dir, meta, global_batch_size), epochs=args.epochs,
                        steps_per_epoch=steps, verbose=2)
    print(f"final accuracy {history.history['accuracy'][-1]:.4f}", flush=True)

    # Every worker saves (saving runs collective ops: tensorflow#38635); tfk8s gives each worker other than the
    # chief a scratch TFK8S_MODEL_DIR of its own, so this one line is right on every worker.
    model.save(model_dir)


if __name__ == "__main__":
    main()
