"""``tfk8s datasets`` (tfk8s/cmd/datasets.py): list the prepared-data store's folders with their size and the runs
that read them, delete one, never what a running job reads. The store itself: tests/core/test_data_store.py."""

from __future__ import annotations

import io
import json
import os
import socket
import time
from pathlib import Path

from tests.fakes.toy_store import Writer, _prepare
from tfk8s.cmd import main as tfk8s_main
from tfk8s.core import data_store
from tfk8s.core.data_manifest import verify
from tfk8s.core.layout import VolumeLayout


def _tfk8s(*args: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    from contextlib import redirect_stderr, redirect_stdout

    with redirect_stdout(out), redirect_stderr(err):
        code = tfk8s_main(list(args))
    return code, out.getvalue(), err.getvalue()


def _job_record(volume: Path, run_id: str, state: str) -> None:
    train = VolumeLayout(volume).run(run_id).train
    train.root.mkdir(parents=True, exist_ok=True)
    train.record.write_text(json.dumps({
        "name": f"tfk8s-{run_id}", "backend": "local", "state": state, "run_id": run_id, "created": time.time(),
        "launcher": {"pid": os.getpid(), "host": socket.gethostname()}, "replicas": {"worker": 1},
        "replica_states": {"worker-0": "Running"}}))


def _used_by(volume: Path, run_id: str, done: data_store.Prepared, age_s: float = 0) -> None:
    data_store.write_data_record(volume, run_id, {"path": str(done.path), "key": done.key, "reused": True,
                                                  "prepared_by": done.prepared_by})
    if age_s:
        rec = VolumeLayout(volume).run(run_id).data_record
        doc = json.loads(rec.read_text())
        rec.write_text(json.dumps({**doc, "created": doc["created"] - age_s}))


def test_tfk8s_datasets_lists_each_folder_with_its_size_and_the_runs_that_read_it(tmp_path):
    done = _prepare(tmp_path, "run-1", Writer())
    _used_by(tmp_path, "run-1", done, age_s=7200)
    _used_by(tmp_path, "run-2", done, age_s=7200)
    _job_record(tmp_path, "run-1", "Succeeded")
    _job_record(tmp_path, "run-2", "Succeeded")
    code, out, err = _tfk8s("datasets", "--volume", str(tmp_path))
    assert code == 0 and err == ""
    head, row = out.splitlines()
    assert head.split() == ["DATASET", "VERSION", "KEY", "SHARDS", "EXAMPLES", "SIZE", "STATUS", "RUNS", "IN", "USE",
                            "AGE"]
    assert row.split()[:9] == ["toy", "1.0.0", done.key, "3", "all", "439K", "ok", "run-1,run-2", "-"]
    code, out, _ = _tfk8s("datasets", "--volume", str(tmp_path), "-o", "json")
    (entry,) = json.loads(out)
    assert entry["size_bytes"] == 3 * 150_000 + len('{"dataset": "toy"}\n') and entry["runs"] == ["run-1", "run-2"]
    assert (entry["status"], entry["in_use_by"], entry["prepared_by"]) == ("ok", [], "run-1")
    (done.path / "train-00000-of-00003.tfrecord").unlink()
    code, out, err = _tfk8s("datasets", "--volume", str(tmp_path))
    assert " damaged " in out and f"{done.key}: " in err and "the next run of this key prepares it again" in err


def test_tfk8s_datasets_delete_never_removes_what_a_running_job_reads(tmp_path):
    done = _prepare(tmp_path, "run-1", Writer())
    _used_by(tmp_path, "run-1", done, age_s=7200)
    _job_record(tmp_path, "run-1", "Running")  # its launcher (this process) is alive: the job runs
    code, out, err = _tfk8s("datasets", "delete", done.key, "--volume", str(tmp_path), "--force")
    assert code == 1 and out == ""
    assert f"{done.key} ({done.path}) is read by job tfk8s-run-1 (Running): not deleted" in err
    assert verify(done.path) == ""
    _job_record(tmp_path, "run-1", "Succeeded")
    code, out, err = _tfk8s("datasets", "delete", done.key, "--volume", str(tmp_path))
    assert (code, err) == (0, "")
    assert out.strip() == f"toy/1.0.0/{done.key} deleted (439K; runs that read it: run-1)"
    assert list(done.path.parent.iterdir()) == []  # the folder and its lock file
    code, _, err = _tfk8s("datasets", "delete", done.key, "--volume", str(tmp_path))
    assert code == 4 and f"no prepared data set of key {done.key!r}" in err
    again = _prepare(tmp_path, "run-3", Writer())  # the next run prepares it again
    assert not again.reused and again.key == done.key


def test_tfk8s_datasets_delete_of_a_folder_a_starting_run_reads_needs_force(tmp_path):
    done = _prepare(tmp_path, "run-1", Writer())
    _used_by(tmp_path, "run-1", done)  # just read, no job record yet: between prepare and launch
    code, _, err = _tfk8s("datasets", "delete", done.key, "--volume", str(tmp_path))
    assert code == 1 and "run run-1 (starting: no job record yet): not deleted (--force if" in err
    code, out, _ = _tfk8s("datasets", "delete", done.key, "--volume", str(tmp_path), "--force")
    assert code == 0 and "deleted" in out and not done.path.exists()


def test_tfk8s_datasets_delete_refuses_a_key_being_prepared(tmp_path):
    import fcntl

    done = _prepare(tmp_path, "run-1", Writer())
    lock = VolumeLayout(tmp_path).prepared_lock("toy", "1.0.0", done.key)
    with open(lock) as holder:  # another open file description: flock conflicts as with another process
        fcntl.flock(holder, fcntl.LOCK_EX)
        code, _, err = _tfk8s("datasets", "delete", done.key, "--volume", str(tmp_path))
    assert code == 1 and f"a run is preparing key {done.key} now" in err and verify(done.path) == ""


def test_tfk8s_datasets_says_so_when_the_store_is_empty_and_checks_its_arguments(tmp_path):
    assert _tfk8s("datasets", "--volume", str(tmp_path)) == (
        0, "", f"tfk8s: no prepared data sets under {tmp_path}/datasets\n")
    code, _, err = _tfk8s("datasets", "delete", "--volume", str(tmp_path))
    assert code == 1 and "tfk8s datasets delete needs a KEY" in err

