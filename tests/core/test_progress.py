"""The per-replica progress file: atomic writes, valid JSON for non-finite values, throttling, reading a job."""

from __future__ import annotations

import json
import math

import pytest

from tfk8s.core.progress import (
    PROGRESS_FILE_ENV,
    Progress,
    ProgressReporter,
    progress_file,
    read_job_progress,
    read_progress,
    write_progress,
)


def test_written_progress_reads_back_with_its_fraction(tmp_path):
    path = progress_file(tmp_path, "worker-1")
    write_progress(path, Progress(replica="worker-1", time=100.0, epoch=2, epochs=4, step=117, steps=468,
                                  examples_per_sec=5120.5, loss=0.25))
    p = read_progress(path)
    assert p == Progress("worker-1", 100.0, "running", 2, 4, 117, 468, 5120.5, 0.25)
    assert p.fraction == pytest.approx(0.25)
    assert p.age_s(now=103.5) == pytest.approx(3.5)
    assert path == tmp_path / "progress" / "worker-1.json"
    assert [f.name for f in path.parent.iterdir()] == ["worker-1.json"]  # no temporary file left


def test_nan_loss_is_written_as_null_so_the_file_stays_valid_json(tmp_path):
    path = tmp_path / "p.json"
    write_progress(path, Progress(replica="chief-0", time=1.0, loss=math.nan, examples_per_sec=math.inf))
    data = json.loads(path.read_text())
    assert data["loss"] is None and data["examples_per_sec"] is None


def test_fraction_falls_back_to_epochs_and_done_is_complete():
    assert Progress("w", 0, epoch=3, epochs=4).fraction == pytest.approx(0.5)
    assert Progress("w", 0, state="done").fraction == 1.0
    assert Progress("w", 0).fraction is None


def test_reporter_throttles_but_writes_state_changes_at_once(tmp_path, monkeypatch):
    path = tmp_path / "p.json"
    monkeypatch.setenv(PROGRESS_FILE_ENV, str(path))
    r = ProgressReporter.from_env("worker-0", min_interval_s=60)
    assert r.update(state="starting") is True
    assert r.update(state="running", step=1) is True
    assert r.update(state="running", step=2) is False  # within the interval
    assert read_progress(path).step == 1
    assert r.update(state="done", step=3) is True
    assert read_progress(path).state == "done"
    with pytest.raises(ValueError, match="progress state must be one of"):
        r.update(state="finished")


def test_reporter_without_the_variable_writes_nothing(tmp_path, monkeypatch):
    monkeypatch.delenv(PROGRESS_FILE_ENV, raising=False)
    assert ProgressReporter.from_env("worker-0").update(step=1) is False


def test_read_job_progress_skips_partial_and_foreign_files(tmp_path):
    write_progress(progress_file(tmp_path, "chief-0"), Progress("chief-0", 5.0, step=3))
    (tmp_path / "progress" / "worker-0.json").write_text("{not json")
    assert list(read_job_progress(tmp_path)) == ["chief-0"]
    assert read_job_progress(tmp_path / "missing") == {}
