"""The prepared-data store (tfk8s.core.data_store, data_manifest): keys, reuse, atomic publication, damaged folders
prepared again, two real processes preparing one key. ``tfk8s datasets`` (list, delete, never what a running job
reads): tests/cmd/test_datasets.py. The real prepare step on real MNIST: tests/steps/test_prepare_dataset.py."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.fakes.toy_store import IDENTITY, Writer, _prepare
from tfk8s.core import data_store
from tfk8s.core.data_manifest import read_manifest, verify
from tfk8s.core.layout import VolumeLayout

REPO = Path(__file__).resolve().parents[2]
PROGRAM = REPO / "tests" / "fakes" / "programs" / "store_prepare.py"


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
