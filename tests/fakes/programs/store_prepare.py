"""One run's prepare through the real data store, as a process of its own (tests/core/test_data_store.py starts two at
once, or kills one halfway): waits for GO_FILE, then ``tfk8s.core.data_store.prepare`` of a small synthetic data
set whose writer logs ``<run id> start`` / ``<run id> done`` to EVENTS (appended, one line each) and sleeps
SLEEP_S seconds between its files. Prints the outcome as one JSON line.

    python tests/fakes/programs/store_prepare.py VOLUME RUN_ID EVENTS GO_FILE WAIT_S SLEEP_S
"""

import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

from tfk8s.core import data_store

IDENTITY = {"dataset": "toy", "version": "1.0.0", "splits": ["train"], "max_examples": None, "num_shards": 3}


def log(events: Path, line: str) -> None:
    with open(events, "a") as f:  # O_APPEND: one line each, whoever writes
        f.write(line + "\n")


def main() -> None:
    volume, run_id, events, go, wait_s, sleep_s = sys.argv[1:7]
    events, go = Path(events), Path(go)
    while not go.exists():
        time.sleep(0.01)

    def write(folder: Path) -> None:
        log(events, f"{run_id} start")
        for i in range(3):
            (folder / f"train-{i:05d}-of-00003.tfrecord").write_bytes(bytes([i]) * 200_000)
            time.sleep(float(sleep_s) / 3)
        (folder / "metadata.json").write_text('{"dataset": "toy"}\n')
        log(events, f"{run_id} done")

    done = data_store.prepare(volume, "toy", "1.0.0", IDENTITY, write, run_id=run_id, wait_s=float(wait_s),
                              say=lambda line: log(events, f"{run_id} said: {line}"))
    print(json.dumps({"path": str(done.path), "key": done.key, "reused": done.reused,
                      "prepared_by": done.prepared_by, "waited_s": done.waited_s, "message": done.message()}))


if __name__ == "__main__":
    main()
