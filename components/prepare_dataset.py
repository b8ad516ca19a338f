"""prepare_dataset: a TFDS data set -> sharded TFRecords + metadata.json on the shared volume.

Every worker then reads its own shards (tf.data FILE auto-sharding): no data is copied by hand.
"""

import argparse

from kfp import dsl
from kfp.dsl import Dataset

from components import DEFAULT_IMAGE
from tfk8s.steps.cli import add_results_dir_argument, emit, main_guard

CLI_IO = {
    # Outside KFP (the Argo export, any container engine): each input artifact -> the CLI flag taking its
    # path; each output -> the field of the CLI's JSON result (see --results-dir) holding its path or value.
    "inputs": {},
    "outputs": {"dataset": "path"},
}


@dsl.component(base_image=DEFAULT_IMAGE, install_kfp_package=False)
def prepare_dataset(
    dataset: dsl.Output[Dataset],
    dataset_name: str = "mnist",
    tfds_data_dir: str = "",
    volume_root: str = "/mnt/tfk8s",
    run_id: str = "local",
    num_shards: int = 0,
    num_workers: int = 2,
    max_examples: int = 0,
    chief: int = 0,
    download: bool = True,
    data_dir: str = "",
    reuse_data: bool = True,
    data_uri: str = "",
    s3_endpoint: str = "",
):
    """Shard a TFDS data set (or read ``data_uri``'s objects from a bucket) into TFRecords + metadata.json in the volume's store, reusing an earlier run's
    preparation of the same key (``reuse_data``; false: a fresh copy in the run's folder), or (with ``data_dir``)
    check the folder the user prepared; the Dataset artifact carries the metadata (splits, examples, shard
    files), the data folder's ``path`` and, for prepared data, its ``key``, ``reused`` and ``prepared_by``."""
    from tfk8s.steps.cli import failure_reported

    with failure_reported("prepare_dataset"):  # the reason as the pod's termination message (KFP's UI, --wait)
        import json  # the body runs on its own under KFP: module imports are not there

        from tfk8s.steps.prepare_dataset import prepare_dataset_step

        md = prepare_dataset_step(
            dataset_name=dataset_name,
            tfds_data_dir=tfds_data_dir,
            volume_root=volume_root,
            run_id=run_id,
            num_shards=num_shards,
            num_workers=num_workers,
            max_examples=max_examples,
            chief=chief,
            download=download,
            data_dir=data_dir,
            reuse_data=reuse_data,
            data_uri=data_uri,
            s3_endpoint=s3_endpoint,
        )
        with open(dataset.path, "w") as f:
            json.dump(md, f, indent=2)
        dataset.metadata.update(
            {
                "path": md["path"],
                "dataset": md["dataset"],
                "format": md.get("format", "tfk8s"),
                "version": md.get("version", ""),
                "num_classes": md.get("num_classes", 0),
                "splits": {s: v["num_examples"] for s, v in md["splits"].items()},
                "shards": {s: len(v["files"]) for s, v in md["splits"].items()},
                **{k: md[k] for k in ("key", "reused", "prepared_by", "data_record") if k in md},
            }
        )


@main_guard
def main(argv: list[str] | None = None) -> None:
    """CLI: ``python -m components.prepare_dataset --help``; prints the metadata as JSON."""
    from tfk8s.steps.parameters import PREPARE, add_step_arguments, step_arguments

    p = argparse.ArgumentParser(prog="python -m components.prepare_dataset", description=__doc__)
    p.add_argument("--run-id", default="local", help="the pipeline run's id (names the run's folder)")
    add_step_arguments(p, PREPARE)  # --dataset-name, --num-workers, --download ... (the parameter table)
    add_results_dir_argument(p)
    a = p.parse_args(argv)
    from tfk8s.steps.prepare_dataset import prepare_dataset_step

    md = prepare_dataset_step(run_id=a.run_id, **step_arguments(a, PREPARE))
    emit(md, a.results_dir)


if __name__ == "__main__":
    main()
