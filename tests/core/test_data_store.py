"""The prepared-data store (tfk8s.core.data_store, data_manifest): keys, reuse, atomic publication, damaged folders
prepared again, two real processes preparing one key, and ``tfk8s datasets`` (list, delete, never what a running
job reads). The real prepare step on real MNIST: tests/steps/test_prepare_dataset.py."""

from __future__ import annotations

import io
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tfk8s.cmd import main as tfk8s_main
from tfk8s.core import data_hold, data_store
from tfk8s.core.data_manifest import read_manifest, verify
from tfk8s.core.layout import VolumeLayout

REPO = Path(__file__).resolve().parents[2]
PROGRAM = REPO / "tests" / "fakes" / "programs" / "store_prepare.py"
IDENTITY = {"dataset": "toy", "version": "1.0.0", "splits": ["train"], "max_examples": None, "num_shards": 3}


class Writer:
    """A ``write`` for :func:`data_store.prepare`: three shards and a metadata.json; counts its calls."""

    def __init__(self, fill: int = 7):
        self.calls, self.fill = 0, fill

    def __call__(self, folder: Path) -> None:
        self.calls += 1
        for i in range(3):
            (folder / f"train-{i:05d}-of-00003.tfrecord").write_bytes(bytes([self.fill + i]) * 150_000)
        (folder / "metadata.json").write_text('{"dataset": "toy"}\n')


def _prepare(volume: Path, run_id: str, writer: Writer, identity: dict = IDENTITY) -> data_store.Prepared:
    return data_store.prepare(volume, "toy", "1.0.0", identity, writer, run_id=run_id)


# --- keys --------------------------------------------------------------------------------------------------------

def test_equal_identities_share_a_key_and_any_changed_value_gives_another():
    key = data_store.data_key(IDENTITY)
    assert len(key) == 16 and int(key, 16) >= 0
    assert data_store.data_key(dict(reversed(list(IDENTITY.items())))) == key  # order of the keys is not content
    changed = [{**IDENTITY, "max_examples": 100}, {**IDENTITY, "num_shards": 4}, {**IDENTITY, "version": "1.0.1"},
               {**IDENTITY, "splits": ["train", "test"]}, {**IDENTITY, "source": {"files": [["a", 1]]}}]
    keys = {data_store.data_key(c) for c in changed}
    assert key not in keys and len(keys) == len(changed)


# --- reuse -------------------------------------------------------------------------------------------------------

def test_a_second_run_of_the_same_key_prepares_nothing_and_says_who_prepared_it(tmp_path):
    writer = Writer()
    first = _prepare(tmp_path, "run-1", writer)
    assert (first.reused, first.prepared_by, writer.calls) == (False, "run-1", 1)
    assert first.path == VolumeLayout(tmp_path).prepared("toy", "1.0.0", first.key)
    manifest = read_manifest(first.path)
    assert manifest["key"] == first.key and manifest["identity"] == IDENTITY
    assert sorted(manifest["files"]) == ["metadata.json"] + [f"train-{i:05d}-of-00003.tfrecord" for i in range(3)]
    assert manifest["files"]["train-00001-of-00003.tfrecord"]["size"] == 150_000
    second = _prepare(tmp_path, "run-2", writer)
    assert (second.reused, second.prepared_by, second.path, writer.calls) == (True, "run-1", first.path, 1)
    assert second.message().startswith("reused data prepared by run run-1 at ")
    assert f"{first.path} (key {first.key}" in second.message()
    # the data set's folder holds the key and its lock file, nothing half-written
    assert sorted(p.name for p in first.path.parent.iterdir()) == [first.key, f"{first.key}.lock"]


def test_a_different_identity_is_prepared_beside_not_over_the_first(tmp_path):
    a = _prepare(tmp_path, "run-1", Writer())
    b = _prepare(tmp_path, "run-2", Writer(fill=50), {**IDENTITY, "max_examples": 10})
    assert a.key != b.key and not b.reused and verify(a.path) == "" and verify(b.path) == ""


@pytest.mark.parametrize("damage, why", [
    (lambda p: (p / "train-00001-of-00003.tfrecord").unlink(), "train-00001-of-00003.tfrecord is missing"),
    (lambda p: (p / "manifest.json").unlink(), "has no valid manifest.json"),
    (lambda p: (p / "manifest.json").write_text("{half"), "has no valid manifest.json"),
    (lambda p: os.truncate(p / "train-00002-of-00003.tfrecord", 1000), "has 1000 bytes, the manifest says 150000"),
    (lambda p: _rewrite_same_size(p / "metadata.json"), "was modified after it was prepared"),
    (lambda p: _rewrite_keeping_times(p / "train-00000-of-00003.tfrecord", 0), "first and last 64 KiB"),
])
def test_a_deleted_or_altered_folder_is_detected_and_prepared_again(tmp_path, damage, why):
    writer = Writer()
    first = _prepare(tmp_path, "run-1", writer)
    damage(first.path)
    assert why in verify(first.path)
    again = _prepare(tmp_path, "run-2", writer)
    assert (again.reused, again.prepared_by, writer.calls) == (False, "run-2", 2)
    assert why in again.replaced and "again (" in again.message()
    assert verify(again.path, deep=True) == ""
    assert (again.path / "train-00001-of-00003.tfrecord").read_bytes() == bytes([8]) * 150_000
    assert sorted(p.name for p in again.path.parent.iterdir()) == [again.key, f"{again.key}.lock"]  # nothing aside


def _rewrite_same_size(path: Path) -> None:
    data = path.read_bytes()
    st = path.stat()
    path.write_bytes(data.upper())
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000))


def _rewrite_keeping_times(path: Path, offset: int) -> None:
    """Change one byte at ``offset`` and put the file's times back (as ``cp -p`` of another file would)."""
    st = path.stat()
    with open(path, "r+b") as f:
        f.seek(offset)
        f.write(b"\xff")
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))


def test_a_change_in_the_middle_with_the_times_kept_is_seen_only_by_the_deep_check(tmp_path):
    first = _prepare(tmp_path, "run-1", Writer())
    _rewrite_keeping_times(first.path / "train-00000-of-00003.tfrecord", 75_000)  # past both 64 KiB ends
    assert verify(first.path) == ""  # the documented limit of the cheap check
    assert "differs from what was prepared (sha256)" in verify(first.path, deep=True)


def test_a_writer_that_fails_leaves_no_key_folder_and_the_next_run_prepares(tmp_path):
    def crash(folder: Path) -> None:
        (folder / "train-00000-of-00003.tfrecord").write_bytes(b"partial")
        raise RuntimeError("disk went away")

    with pytest.raises(RuntimeError, match="disk went away"):
        _prepare(tmp_path, "run-1", crash)
    key = data_store.data_key(IDENTITY)
    base = VolumeLayout(tmp_path).dataset_base("toy", "1.0.0")
    assert sorted(p.name for p in base.iterdir()) == [f"{key}.lock"]  # staging removed, no <key>/
    writer = Writer()
    done = _prepare(tmp_path, "run-2", writer)
    assert (done.reused, done.prepared_by, writer.calls) == (False, "run-2", 1)


# --- real processes ----------------------------------------------------------------------------------------------

def _start(volume: Path, run_id: str, events: Path, go: Path, wait_s: float, sleep_s: float) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, str(PROGRAM), str(volume), run_id, str(events), str(go), str(wait_s),
                             str(sleep_s)], cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _outcome(p: subprocess.Popen) -> dict:
    out, err = p.communicate(timeout=120)
    assert p.returncode == 0, err[-3000:]
    return json.loads(out.strip().splitlines()[-1])


def test_two_processes_preparing_one_key_at_once_prepare_it_once_and_both_read_it(tmp_path):
    events, go = tmp_path / "events.log", tmp_path / "go"
    procs = [_start(tmp_path / "volume", f"run-{i}", events, go, 600, 1.5) for i in (1, 2)]
    go.touch()
    a, b = (_outcome(p) for p in procs)
    lines = events.read_text().splitlines()
    starts = [line for line in lines if line.endswith(" start")]
    assert len(starts) == 1  # one prepared, the other waited
    winner = starts[0].split()[0]
    (prepared,), (reused,) = [o for o in (a, b) if not o["reused"]], [o for o in (a, b) if o["reused"]]
    assert prepared["prepared_by"] == winner and reused["prepared_by"] == winner
    assert reused["path"] == prepared["path"]
    assert reused["message"].startswith(f"reused data prepared by run {winner} at ")
    loser = "run-2" if winner == "run-1" else "run-1"
    said = [line for line in lines if line.startswith(f"{loser} said: another run is preparing key ")]
    # both start together and the winner writes for 1.5 s, so the loser found the lock held: it waited and said
    # so once (a failed lock attempt is what makes it say it, so the two always go together)
    assert reused["waited_s"] >= data_store.POLL_S and len(said) == 1, (reused, lines)
    assert f"after waiting {reused['waited_s']:.1f}s for it" in reused["message"]
    assert verify(prepared["path"], deep=True) == ""
    assert sorted(p.name for p in Path(prepared["path"]).parent.iterdir()) == [prepared["key"],
                                                                             f"{prepared['key']}.lock"]


def test_without_the_lock_both_prepare_their_own_copy_and_the_first_rename_wins(tmp_path):
    """wait_s=0 is the path of a file system without locks (or a wait that ran out): each run writes its own
    staging folder; the loser of the rename reuses the winner's folder and removes its copy."""
    events, go = tmp_path / "events.log", tmp_path / "go"
    first = _start(tmp_path / "volume", "run-1", events, go, 600, 1.5)
    go.touch()
    while "run-1 start" not in (events.read_text() if events.exists() else ""):
        time.sleep(0.02)
    second = _start(tmp_path / "volume", "run-2", events, go, 0, 0)  # finds the lock held, prepares its own copy
    b, a = _outcome(second), _outcome(first)
    lines = events.read_text().splitlines()
    assert {line for line in lines if line.endswith((" start", " done"))} == {
        "run-1 start", "run-1 done", "run-2 start", "run-2 done"}
    assert (b["reused"], b["prepared_by"]) == (False, "run-2")  # its rename came first
    assert (a["reused"], a["prepared_by"]) == (True, "run-2")  # run-1 lost the rename: reuses run-2's folder
    assert a["path"] == b["path"] and verify(a["path"], deep=True) == ""
    assert sorted(p.name for p in Path(a["path"]).parent.iterdir()) == [a["key"], f"{a['key']}.lock"]


def test_a_run_killed_while_preparing_leaves_no_key_folder_and_no_held_lock(tmp_path):
    events, go = tmp_path / "events.log", tmp_path / "go"
    volume = tmp_path / "volume"
    p = _start(volume, "run-1", events, go, 600, 60)
    go.touch()
    while "run-1 start" not in (events.read_text() if events.exists() else ""):
        time.sleep(0.02)
    p.send_signal(signal.SIGKILL)
    p.communicate(timeout=30)
    key = data_store.data_key(IDENTITY)
    base = VolumeLayout(volume).dataset_base("toy", "1.0.0")
    names = sorted(x.name for x in base.iterdir())
    assert key not in names and f"{key}.lock" in names
    assert any(n.startswith(f".staging-{key}-") for n in names)  # its half-written copy, never reused
    assert not data_store._is_locked(base / f"{key}.lock")  # the kernel released the dead run's lock
    writer = Writer()
    done = data_store.prepare(volume, "toy", "1.0.0", IDENTITY, writer, run_id="run-2", wait_s=0)
    assert (done.reused, done.prepared_by, done.waited_s < 1, writer.calls) == (False, "run-2", True, 1)


# --- tfk8s datasets ----------------------------------------------------------------------------------------------

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
    step = {"data_dir": str(data), "volume_root": str(tmp_path), "run_id": "r1", "backend": "local",
            "params": {"command": "python t.py"}}
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
