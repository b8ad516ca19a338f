"""``tfk8s datasets [delete KEY...]``: the prepared-data store (``<volume>/datasets/<data set>/<version>/<key>/``,
:mod:`tfk8s.core.data_store`): each folder with its size, the runs that read it and whether a run reads it now;
``delete`` removes folders no run reads.

A run holds the folder its data record (``runs/<run id>/data.json``) names for as long as one of its steps can
still read it, not only while its training job runs (:func:`holds`):

- its job record has not ended (``tfk8s get``'s state: Running, with the cluster's live replicas laid over for a
  Kubernetes job asked with ``-n``): never deleted, even with ``--force``;
- a step of the run reads it now (its hold, ``runs/<run id>/data-hold.json``, refreshed within
  :data:`tfk8s.core.data_hold.READING_FRESH_S`; :func:`tfk8s.core.data_hold.reading`): never deleted either;
- the run is between steps that read it: no job record yet (between its prepare and launch steps), or its job
  succeeded and its evaluate step has not released the hold (its export and evaluate steps are still to come),
  within :data:`tfk8s.core.data_hold.HOLD_S` of the run's last sign of life. ``--force`` deletes it anyway, for a
  run known to be gone.

A run whose job failed or was stopped, or whose last reading step released its hold, holds nothing.
"""

from __future__ import annotations

import argparse
import time
from dataclasses import dataclass
from typing import Any

from tfk8s.cmd.context import EXIT_FAILED, EXIT_NOT_FOUND, EXIT_OK, Context, CtlError, age, dump, table
from tfk8s.core import data_hold, data_store
from tfk8s.core.data_manifest import verify
from tfk8s.core.layout import VolumeLayout
from tfk8s.tracking import records

STARTING_S = data_hold.HOLD_S
"""A run that read a folder and has no job record yet counts as starting (in use) for this long after its data
record was written."""


def add_parser(sub: Any, common: argparse.ArgumentParser) -> None:
    """Add ``datasets`` and its flags to the command's subparsers."""
    p = sub.add_parser("datasets", parents=[common], help="list the prepared data sets, or delete one")
    p.add_argument("action", nargs="?", choices=("delete",), help="delete the folders of the keys given")
    p.add_argument("keys", nargs="*", metavar="KEY", help="with delete: the keys (as the KEY column shows them)")
    p.add_argument("-o", "--output", choices=("wide", "json", "yaml"), default="")
    p.add_argument("--verify", action="store_true",
                   help="check every file's full sha256 against the manifest (reads all the data; says what "
                        "it checked)")
    p.add_argument("--force", action="store_true",
                   help="with delete: also delete a folder a run holds between its steps (no job record yet, or "
                        "its evaluate step still to come), for a run known to be gone; never one a running job "
                        "or step reads")


def size(n: int) -> str:
    """Bytes as ``du -h`` shows them: ``512B``, ``1.5K``, ``52M``, ``1.2G``."""
    for unit in ("B", "K", "M", "G", "T"):
        if n < 1024 or unit == "T":
            return f"{n}{unit}" if unit == "B" else (f"{n:.1f}{unit}" if n < 10 else f"{n:.0f}{unit}")
        n /= 1024
    return f"{n}"


@dataclass(frozen=True)
class Hold:
    """One run's hold on a folder: ``what`` (as the refusal and ``in_use_by`` say it), ``live`` (a running job or
    step reads it: never deleted) and ``next`` (how to go on)."""

    what: str
    live: bool
    next: str

    def __str__(self) -> str:
        return self.what


def holds(ctx: Context, stored: data_store.StoredDataset, now: float | None = None) -> list[Hold]:
    """Which runs hold ``stored`` now, and how (the module docstring's rules)."""
    now = time.time() if now is None else now
    layout = VolumeLayout(ctx.volume)
    created = {str(r["run_id"]): float(r.get("created") or 0) for r in data_store.read_data_records(ctx.volume)}
    found = []
    for run_id in stored.runs:
        run = layout.run(run_id)
        record = records.read_record(run.train.record)
        hold = data_hold.read_hold(run.run_dir) or {}
        state = None
        if record is not None:
            live = ctx.live(record.get("namespace") or ctx.namespace) if ctx.in_cluster(record) and ctx.namespace else None
            state = records.effective_state(ctx.overlay(record, live))
            name = record.get("name")
            if state not in records.TERMINAL_STATES:
                found.append(Hold(f"job {name} ({state})", True,
                                  f"wait for it to end (tfk8s wait {name}) or stop it (tfk8s delete {name}), "
                                  f"then delete again"))
                continue
        if hold.get("state") == "released":
            continue
        if state is not None and state != "Succeeded" and hold.get("state") != "reading":
            continue  # its job did not succeed: the launch step failed, the run's later steps do not run
        step = hold.get("step") or "?"
        updated = float(hold.get("updated") or 0)
        if hold.get("state") == "reading" and now - updated < data_hold.READING_FRESH_S:
            found.append(Hold(f"run {run_id} (its {step} step reads it now)", True,
                              f"wait for run {run_id}'s {step} step to end, then delete again"))
            continue
        last = max(created.get(run_id, 0), updated, *(float((record or {}).get(k) or 0)
                                                         for k in ("created", "finished", "updated")))
        if now - last >= data_hold.HOLD_S:
            continue  # no sign of the run for that long: it is gone
        left = age(data_hold.HOLD_S - (now - last))
        if record is None and not hold:
            what = f"run {run_id} (starting: no job record yet)"
        elif hold.get("state") == "reading":
            what = f"run {run_id} (its {step} step, last heard from {age(now - updated)} ago, may still read it)"
        else:
            ended = float(record.get("finished") or record.get("updated") or 0) if record else 0
            when = f" {age(now - ended)} ago" if ended else ""
            what = (f"run {run_id} (its training ended{when}; its evaluate step, still to come, reads it)"
                    if record is not None else f"run {run_id} (between its steps)")
        found.append(Hold(what, False, f"delete it once that run has ended, or now with --force if that run is "
                                       f"gone (its hold lapses by itself in {left})"))
    return found


def readers(ctx: Context, stored: data_store.StoredDataset, now: float | None = None) -> list[str]:
    """Who holds ``stored`` now, in words (:func:`holds`): ``job <name> (Running)``, ``run <id> (starting: ...)``,
    ``run <id> (its training ended ...; its evaluate step, still to come, reads it)``..."""
    return [str(h) for h in holds(ctx, stored, now)]


def verified_line(rows_data: list[tuple[data_store.StoredDataset, str, Any]]) -> str:
    """What ``--verify`` checked, in one line: how many folders, files and bytes were read and compared with
    their manifests' sha256, and how many passed."""
    checked = [(s, problem) for s, problem, _ in rows_data if not s.problem]
    files, read = sum(s.files for s, _ in checked), sum(s.size_bytes for s, _ in checked)
    bad = [s.key for s, problem, _ in rows_data if problem]
    verdict = (f"{len(bad)} damaged: {', '.join(bad)}" if bad else
               "every file matches its manifest" if checked else "nothing to check")
    return (f"verified: {len(checked)} folder(s), {files} file(s), {size(read)} read in full and each file's sha256 "
            f"compared with its folder's manifest: {verdict}")


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
            if self.verify:
                ctx.warn(verified_line(rows_data))
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
        if self.verify:
            ctx.warn(verified_line(rows_data))
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
            using = holds(ctx, s)
            live = [h for h in using if h.live]
            if live or (using and not self.force):
                ways = "; ".join(dict.fromkeys(h.next for h in (live or using)))
                ctx.warn(f"error: {key} ({s.path}) is read by {', '.join(map(str, using))}: not deleted: {ways}")
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
