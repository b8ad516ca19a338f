"""``tfk8s datasets [delete KEY...]``: the prepared-data store (``<volume>/datasets/<data set>/<version>/<key>/``,
:mod:`tfk8s.core.data_store`): each folder with its size, the runs that read it and whether a running job reads
it now; ``delete`` removes folders no running job reads.

A folder is in use when a run whose data record (``runs/<run id>/data.json``) names it has a job record that has
not ended (``tfk8s get``'s state: Running, with the cluster's live replicas laid over for a Kubernetes job asked
with ``-n``), or has no job record yet and its data record is younger than :data:`STARTING_S` (the run is
between its prepare and launch steps). ``--force`` deletes the latter anyway, never the former.
"""

from __future__ import annotations

import argparse
import time
from dataclasses import dataclass
from typing import Any

from tfk8s.cmd.context import EXIT_FAILED, EXIT_NOT_FOUND, EXIT_OK, Context, CtlError, age, dump, table
from tfk8s.core import data_store
from tfk8s.core.data_manifest import verify
from tfk8s.core.layout import VolumeLayout
from tfk8s.tracking import records

STARTING_S = 3600.0
"""A run that read a folder and has no job record yet counts as starting (in use) for this long after its data
record was written."""


def add_parser(sub: Any, common: argparse.ArgumentParser) -> None:
    """Add ``datasets`` and its flags to the command's subparsers."""
    p = sub.add_parser("datasets", parents=[common], help="list the prepared data sets, or delete one")
    p.add_argument("action", nargs="?", choices=("delete",), help="delete the folders of the keys given")
    p.add_argument("keys", nargs="*", metavar="KEY", help="with delete: the keys (as the KEY column shows them)")
    p.add_argument("-o", "--output", choices=("wide", "json", "yaml"), default="")
    p.add_argument("--verify", action="store_true",
                   help="check every file's full sha256 against the manifest (reads all the data)")
    p.add_argument("--force", action="store_true",
                   help="with delete: also delete a folder read by a run that has no job record yet (never one "
                        "a running job reads)")


def size(n: int) -> str:
    """Bytes as ``du -h`` shows them: ``512B``, ``1.5K``, ``52M``, ``1.2G``."""
    for unit in ("B", "K", "M", "G", "T"):
        if n < 1024 or unit == "T":
            return f"{n}{unit}" if unit == "B" else (f"{n:.1f}{unit}" if n < 10 else f"{n:.0f}{unit}")
        n /= 1024
    return f"{n}"


def readers(ctx: Context, stored: data_store.StoredDataset, now: float | None = None) -> list[str]:
    """Who reads ``stored`` now: ``job <name> (Running)`` for each job not ended whose run read it, ``run <id>
    (starting: ...)`` for a run without a job record whose data record is younger than :data:`STARTING_S`."""
    now = time.time() if now is None else now
    layout = VolumeLayout(ctx.volume)
    created = {str(r["run_id"]): float(r.get("created") or 0) for r in data_store.read_data_records(ctx.volume)}
    found = []
    for run_id in stored.runs:
        record = records.read_record(layout.run(run_id).train.record)
        if record is None:
            if now - created.get(run_id, 0) < STARTING_S:
                found.append(f"run {run_id} (starting: no job record yet)")
            continue
        live = ctx.live(record.get("namespace") or ctx.namespace) if ctx.in_cluster(record) and ctx.namespace else None
        state = records.effective_state(ctx.overlay(record, live))
        if state not in records.TERMINAL_STATES:
            found.append(f"job {record.get('name')} ({state})")
    return found


@dataclass
class Options:
    """``tfk8s datasets``' options: ``delete`` (with ``keys``) or the list (``output``: ``""``, ``wide``,
    ``json``, ``yaml``); ``verify``: full sha256 check; ``force``: delete what only a starting run reads."""

    delete: bool = False
    keys: tuple[str, ...] = ()
    output: str = ""
    verify: bool = False
    force: bool = False

    @classmethod
    def complete(cls, args: argparse.Namespace) -> Options:
        """The options from the parsed flags."""
        return cls(args.action == "delete", tuple(args.keys or ()), args.output, args.verify, args.force)

    def validate(self) -> None:
        """``delete`` needs a key; keys without ``delete`` are refused."""
        if self.delete and not self.keys:
            raise CtlError("tfk8s datasets delete needs a KEY (tfk8s datasets lists them)")
        if self.keys and not self.delete:
            raise CtlError(f"unexpected {self.keys[0]!r}: to delete, tfk8s datasets delete {' '.join(self.keys)}")

    def run(self, ctx: Context) -> int:
        """List the store's folders, or delete the keys given."""
        stored = data_store.list_stored(ctx.volume)
        return self._delete(ctx, stored) if self.delete else self._list(ctx, stored)

    def _list(self, ctx: Context, stored: list[data_store.StoredDataset]) -> int:
        where = VolumeLayout(ctx.volume).datasets
        rows_data = []
        for s in stored:
            problem = s.problem or verify(s.path, deep=self.verify, key=s.key)
            rows_data.append((s, problem, readers(ctx, s)))
        if self.output in ("json", "yaml"):
            ctx.say(dump([{"dataset": s.dataset, "version": s.version, "key": s.key, "path": str(s.path),
                           "size_bytes": s.size_bytes, "files": s.files, "created": s.created,
                           "prepared_by": s.prepared_by, "runs": list(s.runs), "in_use_by": using,
                           "status": "ok" if not problem else "damaged", "problem": problem,
                           "identity": s.identity} for s, problem, using in rows_data], self.output))
            return EXIT_OK
        if not stored:
            ctx.warn(f"no prepared data sets under {where}")
            return EXIT_OK
        head = ["DATASET", "VERSION", "KEY", "SHARDS", "EXAMPLES", "SIZE", "STATUS", "RUNS", "IN USE", "AGE"]
        if self.output == "wide":
            head += ["PREPARED BY", "PATH"]
        rows = [head]
        now = time.time()
        for s, problem, using in rows_data:
            cap = s.identity.get("max_examples")
            runs = ",".join(s.runs[-3:]) + (f" (+{len(s.runs) - 3})" if len(s.runs) > 3 else "")
            row = [s.dataset, s.version, s.key, str(s.identity.get("num_shards", "-")),
                   "all" if cap is None and s.identity else str(cap or "-"), size(s.size_bytes),
                   "ok" if not problem else "damaged", runs or "-", "yes" if using else "-",
                   age(now - s.created) if s.created else "-"]
            if self.output == "wide":
                row += [s.prepared_by or "-", str(s.path)]
            rows.append(row)
        ctx.say(table(rows))
        for s, problem, _ in rows_data:
            if problem:
                ctx.warn(f"{s.key}: {problem}; the next run of this key prepares it again")
        return EXIT_OK

    def _delete(self, ctx: Context, stored: list[data_store.StoredDataset]) -> int:
        by_key = {s.key: s for s in stored}
        code = EXIT_OK
        for key in self.keys:
            s = by_key.get(key)
            if s is None:
                ctx.warn(f"error: no prepared data set of key {key!r} under {VolumeLayout(ctx.volume).datasets}")
                code = max(code, EXIT_NOT_FOUND)
                continue
            using = readers(ctx, s)
            running = [u for u in using if u.startswith("job ")]
            if running or (using and not self.force):
                hint = "" if running else " (--force if that run is not starting)"
                ctx.warn(f"error: {key} ({s.path}) is read by {', '.join(using)}: not deleted{hint}")
                code = EXIT_FAILED if code == EXIT_OK else code
                continue
            try:
                data_store.remove_stored(ctx.volume, s)
            except data_store.StoreError as e:
                ctx.warn(f"error: {e}")
                code = EXIT_FAILED if code == EXIT_OK else code
                continue
            runs = f"; runs that read it: {', '.join(s.runs)}" if s.runs else ""
            ctx.say(f"{s.dataset}/{s.version}/{key} deleted ({size(s.size_bytes)}{runs})")
        return code
