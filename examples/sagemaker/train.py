"""A SageMaker TensorFlow script-mode program, unchanged: multi-worker Keras written the way SageMaker's docs
show it (arguments defaulting to SM_MODEL_DIR, SM_CHANNEL_TRAIN, SM_HOSTS, SM_CURRENT_HOST; TF_CONFIG for
MultiWorkerMirroredStrategy; the first host saves the model). It reads SageMaker's variables only; tfk8s sets
them as aliases of its own folders (docs/training-program.md, "Programs from Vertex AI and SageMaker"). No tfk8s
import.

Run it on 2 local workers through the whole pipeline (prepare, launch, export, evaluate):

    make run ARGS="--param workers=2 --param command='python examples/sagemaker/train.py --epochs 2'"

SageMaker's channel folder holds the channel's files; here every channel is the prepared data folder, so the
program picks the training split's shards (train-*.tfrecord) and reads the image shape from metadata.json.
The SavedModel goes to SM_MODEL_DIR itself (not a numbered subfolder: the export step numbers the versions).
In an image (FROM the project image, which has TensorFlow and tf-keras):

    FROM ghcr.io/tfk8s/tfk8s:0.1.0
    COPY train.py /home/tfk8s/train.py
    # then: --param image=<your image> --param command='python /home/tfk8s/train.py --epochs 2'
"""

import argparse
import glob
import json
import os
import shutil
import tempfile

os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")  # tf-keras: Keras 3's fit breaks under MultiWorkerMirroredStrategy

import tensorflow as tf


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    # hyperparameters
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--steps-per-epoch", type=int, default=100)
    parser.add_argument("--batch-size", type=int, default=64, help="per host")
    parser.add_argument("--learning-rate", type=float, default=1e-3)
    # SageMaker's environment
    parser.add_argument("--sm-model-dir", type=str, default=os.environ.get("SM_MODEL_DIR"))
    parser.add_argument("--train", type=str, default=os.environ.get("SM_CHANNEL_TRAIN"))
    parser.add_argument("--hosts", type=list, default=json.loads(os.environ.get("SM_HOSTS", '["algo-1"]')))
    parser.add_argument("--current-host", type=str, default=os.environ.get("SM_CURRENT_HOST", "algo-1"))
    return parser.parse_args()


def train_dataset(channel_dir, batch_size):
    with open(os.path.join(channel_dir, "metadata.json")) as f:
        meta = json.load(f)
    files = sorted(glob.glob(os.path.join(channel_dir, "train-*.tfrecord")))
    features = {"image": tf.io.FixedLenFeature([], tf.string), "label": tf.io.FixedLenFeature([], tf.int64)}
    shape = meta["image_shape"]

    def parse(record):
        example = tf.io.parse_single_example(record, features)
        image = tf.cast(tf.reshape(tf.io.decode_raw(example["image"], tf.uint8), shape), tf.float32) / 255.0
        return image, example["label"]

    data = (tf.data.TFRecordDataset(files).map(parse, num_parallel_calls=tf.data.AUTOTUNE)
            .shuffle(2000).repeat().batch(batch_size).prefetch(tf.data.AUTOTUNE))
    return data, meta


def model_fn(image_shape, num_classes, learning_rate):
    model = tf.keras.models.Sequential([
        tf.keras.layers.Flatten(input_shape=image_shape),
        tf.keras.layers.Dense(128, activation="relu"),
        tf.keras.layers.Dropout(0.2),
        tf.keras.layers.Dense(num_classes, activation="softmax"),
    ])
    model.compile(optimizer=tf.keras.optimizers.Adam(learning_rate), loss="sparse_categorical_crossentropy",
                  metrics=["accuracy"])
    return model


if __name__ == "__main__":
    args = parse_args()
    strategy = tf.distribute.MultiWorkerMirroredStrategy()  # the cluster comes from TF_CONFIG
    global_batch = args.batch_size * len(args.hosts)
    data, meta = train_dataset(args.train, global_batch)
    with strategy.scope():
        model = model_fn(meta["image_shape"], meta["num_classes"], args.learning_rate)
    history = model.fit(data, epochs=args.epochs, steps_per_epoch=args.steps_per_epoch, verbose=2)
    print(f"{args.current_host} of {args.hosts}: final accuracy {history.history['accuracy'][-1]:.4f}", flush=True)

    # Under MultiWorkerMirroredStrategy every host saves (saving runs collective ops); the first host's copy is
    # the model, the others write to a temporary folder.
    if args.current_host == args.hosts[0]:
        model.save(args.sm_model_dir)
    else:
        scratch = tempfile.mkdtemp()
        model.save(scratch)
        shutil.rmtree(scratch, ignore_errors=True)
