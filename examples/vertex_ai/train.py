"""A Vertex AI custom training program, unchanged: multi-worker Keras written the way Vertex AI's docs show it
(MultiWorkerMirroredStrategy from TF_CONFIG, the model saved to AIP_MODEL_DIR with the chief/temp-dir rule,
TensorBoard logs to AIP_TENSORBOARD_LOG_DIR, BackupAndRestore in AIP_CHECKPOINT_DIR, the training files from
AIP_TRAINING_DATA_URI). It reads Vertex AI's variables only; tfk8s sets them as aliases of its own folders
(docs/training-program.md, "Programs from Vertex AI and SageMaker"). No tfk8s import.

Run it on 2 local workers through the whole pipeline (prepare, launch, export, evaluate):

    make run ARGS="--param workers=2 --param command='python examples/vertex_ai/train.py --epochs 2'"

Its model takes the data set's uint8 images (rescaled by its first layer), so the pipeline's built-in evaluation
evaluates it. In an image (FROM the project image, which has TensorFlow and tf-keras):

    FROM ghcr.io/tfk8s/tfk8s:0.1.0
    COPY train.py /home/tfk8s/train.py
    # then: --param image=<your image> --param command='python /home/tfk8s/train.py --epochs 2'
"""

import argparse
import json
import os

os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")  # tf-keras: Keras 3's fit breaks under MultiWorkerMirroredStrategy

import tensorflow as tf


def _is_chief(task_type, task_id, cluster):
    # Vertex AI's first worker pool is TF_CONFIG's "chief"; without one, worker 0 is the chief (TF's convention).
    return task_type == "chief" or (task_type == "worker" and task_id == 0 and "chief" not in cluster)


def _get_save_path(task_type, task_id, cluster, model_dir):
    """Every worker saves (saving runs collective ops), the chief to AIP_MODEL_DIR, the others to a temporary
    folder below it, removed afterwards (Vertex AI's multi-worker sample)."""
    if _is_chief(task_type, task_id, cluster):
        return model_dir
    return os.path.join(model_dir, f"workertemp_{task_id}")


def make_dataset(file_pattern, image_shape, global_batch_size):
    """TFRecords of ``image`` (raw uint8 bytes of H x W x C) and ``label`` (int64), shuffled and repeated."""
    files = sorted(tf.io.gfile.glob(file_pattern))
    if not files:
        raise SystemExit(f"no training files match AIP_TRAINING_DATA_URI={file_pattern}")
    features = {"image": tf.io.FixedLenFeature([], tf.string), "label": tf.io.FixedLenFeature([], tf.int64)}

    def parse(record):
        example = tf.io.parse_single_example(record, features)
        return tf.reshape(tf.io.decode_raw(example["image"], tf.uint8), image_shape), example["label"]

    return (tf.data.TFRecordDataset(files).map(parse, num_parallel_calls=tf.data.AUTOTUNE)
            .shuffle(2000).repeat().batch(global_batch_size).prefetch(tf.data.AUTOTUNE))


def build_model(image_shape, num_classes, learning_rate):
    model = tf.keras.Sequential([
        tf.keras.layers.InputLayer(input_shape=image_shape, dtype="uint8"),
        tf.keras.layers.Rescaling(1.0 / 255),
        tf.keras.layers.Conv2D(16, 3, strides=2, activation="relu"),
        tf.keras.layers.Flatten(),
        tf.keras.layers.Dense(64, activation="relu"),
        tf.keras.layers.Dense(num_classes, activation="softmax"),
    ])
    model.compile(optimizer=tf.keras.optimizers.Adam(learning_rate),
                  loss=tf.keras.losses.SparseCategoricalCrossentropy(), metrics=["accuracy"])
    return model


def tensorboard_callback(log_dir, is_chief):
    """Keras' TensorBoard callback, as Vertex AI's docs show. It needs the ``tensorboard`` package, which Vertex
    AI's prebuilt containers have and TensorFlow 2.21 no longer installs (nor does the tfk8s image): without it,
    the chief writes the per-epoch scalars to ``<log_dir>/train`` with ``tf.summary.write``, as TensorBoard's own
    scalar summaries do."""
    try:
        import tensorboard  # noqa: F401
        return tf.keras.callbacks.TensorBoard(log_dir=log_dir, profile_batch=0)
    except ImportError:
        pass
    from tensorflow.core.framework import summary_pb2

    meta = summary_pb2.SummaryMetadata(plugin_data=summary_pb2.SummaryMetadata.PluginData(plugin_name="scalars"))
    writer = tf.summary.create_file_writer(os.path.join(log_dir, "train")) if is_chief else None

    def on_epoch_end(epoch, logs):
        if writer is not None:
            with writer.as_default():
                for name, value in (logs or {}).items():
                    tf.summary.write(f"epoch_{name}", tf.constant(float(value)), step=epoch, metadata=meta)
            writer.flush()

    return tf.keras.callbacks.LambdaCallback(on_epoch_end=on_epoch_end)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--steps_per_epoch", type=int, default=100)
    parser.add_argument("--per_worker_batch", type=int, default=64)
    parser.add_argument("--learning_rate", type=float, default=2e-3)
    args = parser.parse_args()

    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    resolver = strategy.cluster_resolver
    task_type, task_id = resolver.task_type, resolver.task_id
    cluster = resolver.cluster_spec().as_dict()

    data_uri = os.environ["AIP_TRAINING_DATA_URI"]  # e.g. .../train-*
    # the shards' metadata.json next to them: image shape and classes
    with tf.io.gfile.GFile(os.path.join(os.path.dirname(data_uri), "metadata.json")) as f:
        meta = json.load(f)
    image_shape, num_classes = meta["image_shape"], meta["num_classes"]
    global_batch_size = args.per_worker_batch * strategy.num_replicas_in_sync

    with strategy.scope():
        model = build_model(image_shape, num_classes, args.learning_rate)
    callbacks = [
        tensorboard_callback(os.environ["AIP_TENSORBOARD_LOG_DIR"], _is_chief(task_type, task_id, cluster)),
        tf.keras.callbacks.BackupAndRestore(backup_dir=os.path.join(os.environ["AIP_CHECKPOINT_DIR"], "backup")),
    ]
    history = model.fit(make_dataset(data_uri, image_shape, global_batch_size), epochs=args.epochs,
                        steps_per_epoch=args.steps_per_epoch, callbacks=callbacks, verbose=2)
    print(f"{task_type}-{task_id}: final accuracy {history.history['accuracy'][-1]:.4f}", flush=True)

    model_dir = os.environ["AIP_MODEL_DIR"]
    path = _get_save_path(task_type, task_id, cluster, model_dir)
    model.save(path)
    if path != model_dir:
        tf.io.gfile.rmtree(path)


if __name__ == "__main__":
    main()
