"""prepare_dataset: a TFDS data set -> sharded TFRecords + metadata.json on the shared volume.

Every worker then reads its own shards (tf.data FILE auto-sharding): no data is copied by hand.
"""


import argparse
import json

from kfp import dsl
from kfp.dsl import Dataset

from components import DEFAULT_IMAGE


def run(*, dataset_name: str, tfds_data_dir: str, volume_root: str, run_id: str, num_shards: int,
        num_workers: int, max_examples: int, chief: int = 0) -> dict:
    """Prepare the data set under ``<volume_root>/runs/<run_id>/data``.

    Args:
        num_shards: shards per split; 0 chooses 4 per worker (at least as many files as workers is what
            tf.data's FILE auto-shard policy needs).
        num_workers, chief: worker and chief replicas; together they read the shards.
        max_examples: cap per split (0: all), for smoke runs.

    Returns:
        The metadata as a dict, plus ``path`` (the data folder).
    """
    from tfk8s.dataset import default_tfds_data_dir, prepare_dataset
    from tfk8s.layout import RunLayout

    readers = num_workers + chief
    if readers < 1:
        raise ValueError(f"num_workers + chief must be >= 1, got {readers}")
    shards = num_shards or 4 * readers
    if shards < readers:
        raise ValueError(f"num_shards={shards} < {readers} chief/worker replicas: each needs its own shard file")
    out = RunLayout(volume_root, run_id).data_dir
    md = prepare_dataset(dataset_name, out, tfds_data_dir=tfds_data_dir or default_tfds_data_dir(),
                         num_shards=shards, max_examples=max_examples or None)
    return {**json.loads(md.to_json()), "path": str(out)}


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
):
    """Shard a TFDS data set into TFRecords + metadata.json on the volume; the Dataset artifact carries the
    metadata (splits, examples, shard files) and the data folder's ``path``."""
    import json

    from components.prepare_dataset import run

    md = run(dataset_name=dataset_name, tfds_data_dir=tfds_data_dir, volume_root=volume_root, run_id=run_id,
             num_shards=num_shards, num_workers=num_workers, max_examples=max_examples, chief=chief)
    with open(dataset.path, "w") as f:
        json.dump(md, f, indent=2)
    dataset.metadata.update({
        "path": md["path"], "dataset": md["dataset"], "version": md["version"],
        "num_classes": md["num_classes"],
        "splits": {s: v["num_examples"] for s, v in md["splits"].items()},
        "shards": {s: len(v["files"]) for s, v in md["splits"].items()},
    })


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m components.prepare_dataset", description=__doc__)
    p.add_argument("--dataset-name", default="mnist", help="TFDS data set name")
    p.add_argument("--tfds-data-dir", default="", help="TFDS data_dir holding the data (default: TFDS_DATA_DIR)")
    p.add_argument("--volume-root", default="/mnt/tfk8s", help="root of the shared volume")
    p.add_argument("--run-id", default="local", help="the pipeline run's id (names the run's folder)")
    p.add_argument("--num-shards", type=int, default=0, help="shards per split (0: 4 per worker)")
    p.add_argument("--num-workers", type=int, default=2, help="worker replicas reading the shards")
    p.add_argument("--chief", type=int, default=0, help="chief replicas (0 or 1) reading the shards")
    p.add_argument("--max-examples", type=int, default=0, help="cap per split (0: all)")
    a = p.parse_args(argv)
    md = run(dataset_name=a.dataset_name, tfds_data_dir=a.tfds_data_dir, volume_root=a.volume_root,
             run_id=a.run_id, num_shards=a.num_shards, num_workers=a.num_workers, max_examples=a.max_examples,
             chief=a.chief)
    print(json.dumps(md, indent=2))


if __name__ == "__main__":
    main()
