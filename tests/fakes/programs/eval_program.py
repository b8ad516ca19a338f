"""A user's evaluation program (pipeline parameter eval_command): loads the exported model from
TFK8S_MODEL_DIR, evaluates it on the test shards of TFK8S_DATA_DIR with its own preprocessing, and writes its
metrics as one JSON object to TFK8S_METRICS_FILE. Nothing of tfk8s is imported."""

import glob
import json
import os

import numpy as np
import tensorflow as tf


def parse(record):
    ex = tf.io.parse_single_example(record, {"image": tf.io.FixedLenFeature([], tf.string),
                                             "label": tf.io.FixedLenFeature([], tf.int64)})
    return tf.reshape(tf.cast(tf.io.decode_raw(ex["image"], tf.uint8), tf.float32) / 255.0, [784]), ex["label"]


files = sorted(glob.glob(os.path.join(os.environ["TFK8S_DATA_DIR"], "test-*.tfrecord")))
serve = tf.saved_model.load(os.environ["TFK8S_MODEL_DIR"]).signatures["serving_default"]
(input_name,) = serve.structured_input_signature[1].keys()
correct = total = 0
for images, labels in tf.data.TFRecordDataset(files).map(parse).batch(500):
    (logits,) = serve(**{input_name: images}).values()
    correct += int(np.sum(np.argmax(logits.numpy(), axis=1) == labels.numpy()))
    total += int(labels.shape[0])
with open(os.environ["TFK8S_METRICS_FILE"], "w") as f:
    json.dump({"accuracy": correct / total, "examples": total}, f)
print(f"accuracy {correct / total:.4f} on {total} examples", flush=True)
