"""Benchmark 8, prepared data reused: the prepare step of a second run on the same volume / of the first.

    python bench/data_reuse.py [--reps 2] [--param key=value ...]

Each repetition runs ``python pipelines/train.py --local`` twice on one fresh volume folder (the default
parameters unless ``--param`` says else): the first prepares the data set into the volume's store
(``datasets/<name>/<version>/<key>/``), the second finds the key and reuses it (:mod:`tfk8s.core.data_store`).
Then, in one process with TensorFlow already imported, it times the prepare step's own work on a fresh volume
and its reuse (``tfk8s.steps.prepare_dataset.prepare_dataset_step``, same parameters), alternating.

Figures:

- ``data_reuse_prepare_step = second run's prepare step wall / first run's`` (as the pipeline prints them:
  ``tfk8s: prepare-dataset ok (4.6s)``; the second runs in the pre-warmed interpreter's light child, before
  TensorFlow is imported, and imports none: :mod:`tfk8s.steps.data_reuse`, :mod:`tfk8s.localrun.step_server`);
- ``data_reuse_own = the step's own work when it reuses / when it prepares`` (the reuse alone: the TFDS
  builder, the key, the manifest check, the run's data record);
- ``data_reuse_end_to_end = second run end to end / first run end to end``;
- ``data_reuse_bucket = an unchanged bucket prefix reused / its first preparation``: the prepared data uploaded to
  a bucket on a real MinIO on 127.0.0.1 (``tests/steps/s3_server.py``), then ``prepare_dataset_step`` with
  ``data_uri`` on a fresh volume (reads every object) and again (one listing, nothing read); without the MinIO
  binary (``hack/kfp/build.sh --minio``) it says so in one line and prints no such figure.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import Figure, common_args, median, report, reps_of, usable_cores
from bench.pipeline_overhead import run_pipeline, step_walls

STEP = "prepare-dataset"


def own_times(scratch: Path, params: dict[str, int]) -> tuple[float, float]:
    """(seconds to prepare on a fresh volume, seconds to reuse it), in this process with TensorFlow imported."""
    import tensorflow as tf  # noqa: F401 - imported first: its start-up is not the step's own work

    from tfk8s.steps.prepare_dataset import prepare_dataset_step

    kw = {"dataset_name": "mnist", "tfds_data_dir": "", "volume_root": str(scratch), "num_shards": 0,
          "num_workers": params.get("workers", 2), "chief": params.get("chief", 0),
          "max_examples": params.get("max_examples", 0)}
    t0 = time.perf_counter()
    first = prepare_dataset_step(run_id="fresh", **kw)
    fresh = time.perf_counter() - t0
    t0 = time.perf_counter()
    second = prepare_dataset_step(run_id="reuse", **kw)
    reuse = time.perf_counter() - t0
    if first["reused"] or not second["reused"]:
        raise RuntimeError(f"expected a fresh preparation, then a reuse; got {first['reused']}, {second['reused']}")
    return fresh, reuse, Path(first["path"])


def bucket_times(scratch: Path, data: Path) -> tuple[float, float]:
    """(seconds of the first preparation of a bucket prefix holding ``data``, seconds of its reuse), in this
    process: ``data`` uploaded to a MinIO started in ``scratch`` (stopped by its pid afterwards), then
    ``prepare_dataset_step`` with ``data_uri`` twice on one fresh volume."""
    from tests.steps.s3_server import running_minio
    from tfk8s.steps.prepare_dataset import prepare_dataset_step

    (scratch / "minio").mkdir(parents=True)
    saved = {k: v for k, v in os.environ.items() if k.startswith("AWS_")}
    try:
        with running_minio(scratch / "minio") as server:
            client = server.client()
            client.create_bucket(Bucket="bench")
            for f in sorted(p for p in data.rglob("*") if p.is_file() and p.name != "manifest.json"):
                client.upload_file(str(f), "bench", f"mnist/{f.relative_to(data).as_posix()}")
            for k in saved:
                del os.environ[k]
            os.environ.update({"AWS_ACCESS_KEY_ID": server.user, "AWS_SECRET_ACCESS_KEY": server.password,
                               "AWS_CONFIG_FILE": os.devnull, "AWS_SHARED_CREDENTIALS_FILE": os.devnull})
            kw = {"dataset_name": "", "tfds_data_dir": "", "volume_root": str(scratch / "volume"), "num_shards": 0,
                  "num_workers": 1, "max_examples": 0, "data_uri": "s3://bench/mnist", "s3_endpoint": server.endpoint}
            t0 = time.perf_counter()
            first = prepare_dataset_step(run_id="fresh", **kw)
            fresh = time.perf_counter() - t0
            t0 = time.perf_counter()
            second = prepare_dataset_step(run_id="reuse", **kw)
            reuse = time.perf_counter() - t0
    finally:
        for k in [k for k in os.environ if k.startswith("AWS_")]:
            del os.environ[k]
        os.environ.update(saved)
    if first["reused"] or not second["reused"]:
        raise RuntimeError(f"expected the bucket read, then reused; got {first['reused']}, {second['reused']}")
    return fresh, reuse


def main(argv: list[str] | None = None) -> list[Figure]:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--param", action="append", default=[], metavar="KEY=VALUE", help="pipeline parameter")
    common_args(p, reps=2)
    a = p.parse_args(argv)
    params = list(a.param)
    if a.smoke:
        params += ["max_examples=1024", "epochs=1", "min_accuracy=0", "workers=1"]
    ints = {k: int(v) for k, v in (item.split("=", 1) for item in params) if v.lstrip("-").isdigit()}
    steps: list[tuple[float, float]] = []
    ends: list[tuple[float, float]] = []
    owns: list[tuple[float, float]] = []
    buckets: list[tuple[float, float]] = []
    from tests.steps.s3_server import NO_MINIO, minio_binary

    if minio_binary() is None:
        print(f"bench data_reuse: data_reuse_bucket skipped: {NO_MINIO}", flush=True)
    for r in range(reps_of(a)):
        tmp = Path(tempfile.mkdtemp(prefix="bench-reuse-"))
        try:
            wall1, log1 = run_pipeline(tmp / "volume", params)
            wall2, log2 = run_pipeline(tmp / "volume", params)
            if "reused data prepared by run" not in log2:
                raise RuntimeError("the second run did not reuse the first one's data:\n" + log2[-3000:])
            fresh, reuse, prepared = own_times(tmp / "scratch", ints)
            owns.append((fresh, reuse))
            if minio_binary() is not None:
                buckets.append(bucket_times(tmp / "bucket", prepared))
                print(f"  rep {r + 1}: bucket prefix read {buckets[-1][0]:.2f}s then reused {buckets[-1][1]:.3f}s",
                      file=sys.stderr, flush=True)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        s1, s2 = step_walls(log1)[STEP], step_walls(log2)[STEP]
        steps.append((s2, s1))
        ends.append((wall2, wall1))
        print(f"  rep {r + 1}: prepare step {s1:.1f}s then {s2:.1f}s; end to end {wall1:.1f}s then {wall2:.1f}s; "
              f"own work {owns[-1][0]:.2f}s then {owns[-1][1]:.3f}s", file=sys.stderr, flush=True)
    cores = usable_cores()
    note = f"params {' '.join(params) or 'defaults'}; median of {reps_of(a)}"
    figures = [
        Figure("data_reuse_prepare_step", median([x for x, _ in steps]), "second_run", median([y for _, y in steps]),
               "first_run", "s", "", cores, note + "; the prepare step's wall as the pipeline prints it"),
        Figure("data_reuse_own", median([y for _, y in owns]), "reuse", median([x for x, _ in owns]), "prepare",
               "s", "", cores, note + "; prepare_dataset_step in one process with TensorFlow imported"),
        Figure("data_reuse_end_to_end", median([x for x, _ in ends]), "second_run", median([y for _, y in ends]),
               "first_run", "s", "", cores, note),
    ]
    if buckets:
        figures.append(Figure("data_reuse_bucket", median([y for _, y in buckets]), "reuse",
                              median([x for x, _ in buckets]), "first_preparation", "s", "", cores,
                              note + "; an unchanged s3:// prefix on a local MinIO: one listing vs reading every "
                              "object (prepare_dataset_step with data_uri)"))
    report(figures, a.out)
    return figures


if __name__ == "__main__":
    main()
