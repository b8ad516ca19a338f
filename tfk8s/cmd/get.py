"""``tfk8s get [JOB...]``: the jobs (or those named, by job name or run id, as ``kubectl get pods NAME``), as
kubectl shows them: a table (``-o wide`` adds namespace, run, step, ETA, TensorBoard) or data (``-o json|yaml``)."""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from typing import Any

from tfk8s.cmd.context import EXIT_NOT_FOUND, EXIT_OK, Context, age, dump, status_dict, table
from tfk8s.core.layout import VolumeLayout
from tfk8s.tracking import records
from tfk8s.tracking.progress_view import format_duration

HELP = "list the jobs"


def add_parser(sub: Any, common: argparse.ArgumentParser) -> None:
    """Add ``get`` and its flags to the command's subparsers."""
    p = sub.add_parser("get", parents=[common], help=HELP)
    p.add_argument("jobs", nargs="*", metavar="JOB", help="job names or run ids (default: every job)")
    p.add_argument("-o", "--output", choices=("wide", "json", "yaml"), default="")


@dataclass
class Options:
    """``tfk8s get``'s options: ``output`` is ``""``, ``wide``, ``json`` or ``yaml``; ``jobs`` the names (or run
    ids) to show (empty: every job)."""

    output: str = ""
    jobs: tuple[str, ...] = ()

    @classmethod
    def complete(cls, args: argparse.Namespace) -> Options:
        """The options from the parsed flags."""
        return cls(args.output, tuple(getattr(args, "jobs", ()) or ()))

    def validate(self) -> None:
        """Nothing to check beyond the flags' choices."""


    def run(self, ctx: Context) -> int:
        """Print the jobs as a table (``-o wide`` adds namespace, run, step, ETA, TensorBoard) or as data."""
        found = ctx.records()
        namespaces = {r.get("namespace") or "" for r in found
                      if ctx.in_cluster(r) and records.effective_state(r) == "Running"}
        if ctx.namespace:
            namespaces.add(ctx.namespace)
        live: dict[str, dict[str, Any]] = {}
        answered: dict[str, dict[str, Any] | None] = {}
        for ns in sorted(namespaces):
            answered[ns] = ctx.live(ns)
            live.update(answered[ns] or {})
        by_name = {r["name"]: r for r in found}
        merged = [ctx.overlay(r, answered.get(r.get("namespace") or "", answered.get(ctx.namespace)))
                  for r in found]
        merged += [v for k, v in live.items() if k not in by_name]
        missing: list[str] = []
        if self.jobs:  # as `kubectl get pods NAME`: those, and an error for each one there is not
            missing = [j for j in self.jobs if not any(j in (r.get("name"), str(r.get("run_id"))) for r in merged)]
            merged = [r for r in merged if r.get("name") in self.jobs or str(r.get("run_id")) in self.jobs]
            for name in missing:
                ctx.warn(f"error: no job {name!r} recorded under {VolumeLayout(ctx.volume).runs}"
                         + (f" or running in namespace {ctx.namespace}" if ctx.namespace else ""))
            if not merged:
                return EXIT_NOT_FOUND
        statuses = [(r, records.job_status(r)) for r in merged]
        if self.output in ("json", "yaml"):
            ctx.say(dump([{**status_dict(s), "record": r} for r, s in statuses], self.output))
            return EXIT_NOT_FOUND if missing else EXIT_OK
        if not statuses:
            ctx.warn(f"no jobs recorded under {VolumeLayout(ctx.volume).runs}"
                      + (f" or running in namespace {ctx.namespace}" if ctx.namespace else ""))
            return EXIT_OK
        head = ["JOB", "BACKEND", "REPLICAS", "STATE", "PROGRESS", "EPOCH", "EX/S", "RESTARTS", "AGE"]
        if self.output == "wide":
            head += ["NAMESPACE", "RUN", "STEP", "ETA", "TENSORBOARD"]
        rows = [head]
        for r, s in statuses:
            replicas = ",".join(f"{t} {s.ready.get(t, 0)}/{n}" for t, n in s.total.items()) or "-"
            row = [s.name, s.backend, replicas, s.state,
                   f"{s.fraction * 100:.0f}%" if s.fraction is not None else "-",
                   f"{s.epoch}/{s.epochs}" if s.epoch is not None and s.epochs else (str(s.epoch or "-")),
                   f"{s.examples_per_sec:.0f}" if s.examples_per_sec else "-", str(s.restarts), age(s.age_s)]
            if self.output == "wide":
                row += [r.get("namespace") or "-", str(r.get("run_id") or "-"),
                        f"{s.step}/{s.steps}" if s.step is not None and s.steps else str(s.step or "-"),
                        format_duration(s.eta_s) if s.eta_s is not None else "-",
                        (r.get("paths") or {}).get("tensorboard") or "-"]
            rows.append(row)
        ctx.say(table(rows))
        return EXIT_NOT_FOUND if missing else EXIT_OK

