"""A launch step with the tracking of the real one (job record, progress display) around the local backend
running tests/fakes/fake_replica.py: ``python tests/fakes/fake_launch.py TRAIN_DIR BEHAVIOUR_JSON [WORKERS [MAX_RESTARTS]]``."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tfk8s.core.cluster import ReplicaCounts
from tfk8s.core.job import TrainingJob
from tfk8s.launcher.local import run_local
from tfk8s.tracking.tracked import tracked

train_dir = Path(sys.argv[1])
workers = int(sys.argv[3]) if len(sys.argv) > 3 else 2
env = {"FAKE_BEHAVIOUR": sys.argv[2], "PYTHONPATH": str(Path(__file__).resolve().parents[2]),
       "FAKE_STATE_DIR": str(train_dir)}  # counts each replica's attempts
job = TrainingJob(name="tfk8s-" + train_dir.parent.name, counts=ReplicaCounts(worker=workers),
                  command=(sys.executable, str(Path(__file__).resolve().parents[1] / "fakes" / "fake_replica.py")), env=env,
                  train_dir=str(train_dir),  # the contract's TFK8S_PROGRESS_FILE: <train dir>/progress/<label>.json
                  max_restarts=int(sys.argv[4]) if len(sys.argv) > 4 else 0)
try:
    with tracked(job, "local", train_dir) as t:
        t.recorder.result = run_local(job, log_sink=t.sink, stop_grace_s=2)  # tracked keeps the replica logs
except Exception as e:  # noqa: BLE001
    print(f"launch failed: {e}", flush=True)
    sys.exit(1)
