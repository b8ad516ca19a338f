"""A training program that checkpoints within the preemption notice, as TensorFlow documents it: a custom loop
under MultiWorkerMirroredStrategy driven by ``tf.distribute.experimental.PreemptionCheckpointHandler``.

When any worker gets SIGTERM (a preemption notice: an eviction, a spot VM going away, ``kill -TERM``), the
handler makes every worker save a checkpoint at the same step and then exit with ``TerminationConfig``'s restart
code (42 by default outside Google Cloud); on the restart it restores that checkpoint and training goes on from
the saved step. ``w`` (MEAN-aggregated, +1 per step) ends at exactly ``PCH_STEPS`` only if no step was lost or
done twice across the restart. Prints ``pid N``, ``starting at step N``, ``step N`` and ``done: w=W step=N``.
"""

import os
import time

os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")

import tensorflow as tf

STEPS = int(os.environ.get("PCH_STEPS", "60"))
STEP_S = float(os.environ.get("PCH_STEP_S", "0.1"))

print(f"pid {os.getpid()}", flush=True)
strategy = tf.distribute.MultiWorkerMirroredStrategy()
with strategy.scope():
    w = tf.Variable(0.0, aggregation=tf.VariableAggregation.MEAN)
step = tf.Variable(0, dtype=tf.int64)
checkpoint = tf.train.Checkpoint(w=w, step=step)
handler = tf.distribute.experimental.PreemptionCheckpointHandler(
    strategy.cluster_resolver, checkpoint, os.path.join(os.environ["TFK8S_CHECKPOINT_DIR"], "preemption"),
    tf.distribute.experimental.TerminationConfig(grace_period=0))  # exit_fn: sys.exit(42) once it has saved
print(f"starting at step {int(step.numpy())}", flush=True)


@tf.function
def train_step():
    strategy.run(lambda: w.assign_add(1.0))


while int(step.numpy()) < STEPS:
    handler.run(train_step)  # saves, then exits 42, at the step the workers agree on after a SIGTERM
    step.assign_add(1)
    print(f"step {int(step.numpy())}", flush=True)
    time.sleep(STEP_S)
print(f"done: w={float(w.numpy()):g} step={int(step.numpy())}", flush=True)
