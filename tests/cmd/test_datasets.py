"""``tfk8s datasets`` (tfk8s/cmd/datasets.py): list the prepared-data store's folders with their size and the runs
that read them, delete one, never what a running job reads. The store itself: tests/core/test_data_store.py."""

from __future__ import annotations

import io
import json
import os
import socket
import time
from pathlib import Path

import pytest

from tests.fakes.toy_store import Writer, _prepare
from tfk8s.cmd import main as tfk8s_main
from tfk8s.core import data_hold, data_store
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
        "finished": None if state == "Running" else time.time(),
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
    _released(tmp_path, "run-1")  # both runs ended: their evaluate steps released the data
    _released(tmp_path, "run-2")
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
    assert err == (f"tfk8s: error: {done.key} ({done.path}) is read by job tfk8s-run-1 (Running): not deleted: wait "
                   f"for it to end (tfk8s wait tfk8s-run-1) or stop it (tfk8s delete tfk8s-run-1), then delete again\n")
    assert verify(done.path) == ""
    _job_record(tmp_path, "run-1", "Succeeded")
    _released(tmp_path, "run-1")  # its evaluate step, the run's last that reads the data, has ended
    code, out, err = _tfk8s("datasets", "delete", done.key, "--volume", str(tmp_path))
    assert (code, err) == (0, "")
    assert out.strip() == f"toy/1.0.0/{done.key} deleted (439K; runs that read it: run-1)"
    assert list(done.path.parent.iterdir()) == []  # the folder and its lock file
    code, _, err = _tfk8s("datasets", "delete", done.key, "--volume", str(tmp_path))
    assert code == 4 and f"no prepared data set of key {done.key!r}" in err
    again = _prepare(tmp_path, "run-3", Writer())  # the next run prepares it again
    assert not again.reused and again.key == done.key


def _released(volume: Path, run_id: str) -> None:
    with data_hold.reading(VolumeLayout(volume).run(run_id).run_dir, "evaluate-model", last=True):
        pass


def _hold_age(volume: Path, run_id: str, age_s: float) -> None:
    path = VolumeLayout(volume).run(run_id).data_hold
    doc = json.loads(path.read_text())
    path.write_text(json.dumps({**doc, "updated": doc["updated"] - age_s}))


def test_the_run_not_its_training_job_holds_its_data_until_its_evaluate_step_ends(tmp_path):
    """Issue 34: `tfk8s datasets delete KEY` was refused while the training job ran, but accepted without --force
    the moment training ended, while the same run's export and evaluate steps still read the data (the run then
    ended "not servable"). The run holds it until its last step that reads it (evaluate) ends."""
    done = _prepare(tmp_path, "run-1", Writer())
    _used_by(tmp_path, "run-1", done, age_s=7200)  # a long training: its data record is two hours old
    run_dir = VolumeLayout(tmp_path).run("run-1").run_dir
    with data_hold.reading(run_dir, "launch-training", last=False):  # what the launch step does around the job
        _job_record(tmp_path, "run-1", "Running")
    _job_record(tmp_path, "run-1", "Succeeded")  # training ended: export and evaluate are still to come
    assert data_hold.read_hold(run_dir)["state"] == "between steps"
    code, out, err = _tfk8s("datasets", "delete", done.key, "--volume", str(tmp_path))
    assert (code, out) == (1, "")
    assert err.startswith(f"tfk8s: error: {done.key} ({done.path}) is read by run run-1 (its training ended 0s ago; "
                          f"its evaluate step, still to come, reads it): not deleted: delete it once that run has "
                          f"ended, or now with --force if that run is gone (its hold lapses by itself in 59m)"), err
    code, out, err = _tfk8s("datasets", "--volume", str(tmp_path), "-o", "json")
    assert json.loads(out)[0]["in_use_by"] == [
        "run run-1 (its training ended 0s ago; its evaluate step, still to come, reads it)"]

    with data_hold.reading(run_dir, "evaluate-model", last=True):  # the evaluate step reads it now: not even --force
        code, out, err = _tfk8s("datasets", "delete", done.key, "--volume", str(tmp_path), "--force")
        assert code == 1 and err == (f"tfk8s: error: {done.key} ({done.path}) is read by run run-1 (its evaluate-model "
                                     f"step reads it now): not deleted: wait for run run-1's evaluate-model step to "
                                     f"end, then delete again\n")
    assert data_hold.read_hold(run_dir)["state"] == "released"
    code, out, err = _tfk8s("datasets", "delete", done.key, "--volume", str(tmp_path))
    assert (code, err) == (0, "") and not done.path.exists()


def test_a_hold_whose_run_is_gone_lapses_and_a_failed_step_releases_it(tmp_path):
    """No stale hold is left forever: a step that fails releases the run's hold (its later steps do not run); a
    run killed between its steps, or a reading step killed without a word, holds the data HOLD_S after its last
    sign of life, deletable before that with --force; a job that failed holds nothing."""
    done = _prepare(tmp_path, "run-1", Writer())
    _used_by(tmp_path, "run-1", done, age_s=7200)
    run_dir = VolumeLayout(tmp_path).run("run-1").run_dir
    with pytest.raises(RuntimeError), data_hold.reading(run_dir, "launch-training", last=False):
        raise RuntimeError("the training failed")
    hold = data_hold.read_hold(run_dir)
    assert (hold["state"], hold["why"]) == (
        "released", "its launch-training step failed (the run's later steps do not run)")
    _job_record(tmp_path, "run-1", "Failed")
    assert _tfk8s("datasets", "--volume", str(tmp_path), "-o", "json")[1].count('"in_use_by": []') == 1

    _used_by(tmp_path, "run-2", done, age_s=7200)
    run2 = VolumeLayout(tmp_path).run("run-2").run_dir
    with data_hold.reading(run2, "evaluate-model", last=True):
        _hold_age(tmp_path, "run-2", 600)  # killed (SIGKILL: no release) 10 minutes ago, its heartbeat stopped
        _job_record(tmp_path, "run-2", "Succeeded")
        rec = VolumeLayout(tmp_path).run("run-2").train.record
        rec.write_text(json.dumps({**json.loads(rec.read_text()), "created": time.time() - 7200,
                                   "finished": time.time() - 3600}))
        code, _, err = _tfk8s("datasets", "delete", done.key, "--volume", str(tmp_path))
        assert code == 1 and "run run-2 (its evaluate-model step, last heard from 10m ago, may still read it): " \
                             "not deleted: delete it once that run has ended, or now with --force if that run is " \
                             "gone (its hold lapses by itself in 49m)" in err, err
        _hold_age(tmp_path, "run-2", data_hold.HOLD_S)  # no sign of it for over an hour: gone
        code, out, err = _tfk8s("datasets", "delete", done.key, "--volume", str(tmp_path))
        assert (code, err) == (0, "") and "deleted" in out


def test_the_launch_step_holds_the_runs_data_and_releases_it_when_the_training_fails(tmp_path, monkeypatch):
    from tfk8s.core.errors import LaunchError
    from tfk8s.steps import launch_training

    data = tmp_path / "rec"
    (data / "train").mkdir(parents=True)
    (data / "train" / "part-0.tfrecord.gz").write_bytes(b"x")
    data_store.write_data_record(tmp_path, "r1", {"path": str(data)})
    run_dir = VolumeLayout(tmp_path).run("r1").run_dir
    seen = []

    def run_job(job, backend, train_dir, **kw):
        seen.append(data_hold.read_hold(run_dir)["state"])
        if len(seen) == 2:
            raise LaunchError("worker-0 failed")
        return "outcome"

    monkeypatch.setattr(launch_training, "run_job", run_job)
    from tfk8s.steps.parameters import LaunchSpec

    spec = LaunchSpec.from_params({"command": "python t.py"}, backend="local", volume_root=str(tmp_path))
    step = {"data_dir": str(data), "run_id": "r1", "spec": spec}
    assert launch_training.launch_training_step(**step) == "outcome"
    assert data_hold.read_hold(run_dir)["state"] == "between steps"
    with pytest.raises(LaunchError):
        launch_training.launch_training_step(**step)
    assert seen == ["reading", "reading"] and data_hold.read_hold(run_dir)["state"] == "released"


def test_tfk8s_datasets_verify_says_what_it_checked(tmp_path):
    """Issue 34: `--verify` read every byte and showed nothing of the check it ran."""
    done = _prepare(tmp_path, "run-1", Writer())
    code, out, err = _tfk8s("datasets", "--volume", str(tmp_path), "--verify")
    assert code == 0 and err == ("tfk8s: verified: 1 folder(s), 4 file(s), 439K read in full and each file's sha256 "
                                 "compared with its folder's manifest: every file matches its manifest\n")
    with open(done.path / "train-00001-of-00003.tfrecord", "r+b") as f:  # same size, times kept: only sha256 sees it
        st = os.stat(f.fileno())
        f.seek(100_000)
        f.write(b"\0")
    os.utime(done.path / "train-00001-of-00003.tfrecord", ns=(st.st_atime_ns, st.st_mtime_ns))
    code, out, err = _tfk8s("datasets", "--volume", str(tmp_path), "--verify", "-o", "json")
    assert json.loads(out)[0]["status"] == "damaged"
    assert err.endswith(f"its folder's manifest: 1 damaged: {done.key}\n"), err


def test_tfk8s_datasets_delete_of_a_folder_a_starting_run_reads_needs_force(tmp_path):
    done = _prepare(tmp_path, "run-1", Writer())
    _used_by(tmp_path, "run-1", done)  # just read, no job record yet: between prepare and launch
    code, _, err = _tfk8s("datasets", "delete", done.key, "--volume", str(tmp_path))
    assert code == 1 and "run run-1 (starting: no job record yet): not deleted: delete it once that run has " \
                         "ended, or now with --force if that run is gone (its hold lapses by itself in 59m)" in err
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
