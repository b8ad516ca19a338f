"""``pipelines/train.py``'s flags for a cluster: submit a run, create a nightly schedule, export to Argo.

    python pipelines/train.py --run --host URL [--experiment NAME] [--param key=value ...] [--upload]
    python pipelines/train.py --schedule "0 0 2 * * *" --host URL [--experiment NAME] [--param key=value ...]
    python pipelines/train.py --compile --format argo [--output compiled/train.argo.yaml]
    python pipelines/train.py --compile --format argo --schedule "0 2 * * *" [--timezone Europe/Berlin]
                                                      # an Argo CronWorkflow, compiled/train.cron.yaml

``--run`` and ``--schedule`` compile the pipeline afresh (into a temporary file; ``--package PATH`` submits an
existing one instead) and submit it with :mod:`tfk8s.submit.kfp_client`. Bad values fail before any request with one
line naming the problem: unknown parameter, malformed cron, no or unreachable host.

:func:`add_arguments` adds the flags to ``train.py``'s parser, :func:`handle` runs them.
"""

from __future__ import annotations

import argparse
import contextlib
import inspect
import os
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from tfk8s.submit import kfp_client, kfp_runs
from tfk8s.submit.cron import argo_schedule, check_timezone, validate_cron
from tfk8s.submit.errors import KfpClientError
from tfk8s.submit.pipeline_inputs import parse_param_items

COMPILE_FORMATS = ("kfp", "argo")


MODES = ("compile", "local", "run", "schedule")


def _seconds(text: str) -> float:
    """argparse type of ``--wait SECONDS``: a number > 0."""
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not value > 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds > 0 (e.g. 3600; --wait alone: "
                                         f"{kfp_runs.DEFAULT_WAIT_S:g})")
    return value


def add_arguments(parser: argparse.ArgumentParser, mode_group) -> None:
    """Add ``--run`` to the (mutually exclusive) ``mode_group``, ``--schedule`` (a mode of its own, or with
    ``--compile --format argo`` the CronWorkflow's schedule) and the options to ``parser``; the group stops being
    required: :func:`check_mode` does that check after parsing. ``parser`` must already have ``--output`` and
    ``--param`` (train.py's)."""
    mode_group.required = False
    mode_group.add_argument(
        "--run", action="store_true",
        help=f"compile, then start one run on a KFP cluster (needs --host URL or ${kfp_client.HOST_ENV})"
    )
    parser.add_argument(
        "--schedule",
        metavar="CRON",
        help=f"compile, then create a recurring run on a KFP cluster (needs --host URL or ${kfp_client.HOST_ENV}). "
        "KFP cron has 6 fields, "
        "seconds minutes hours day-of-month month day-of-week, in the scheduler's time zone (usually UTC): "
        "'0 0 2 * * *' is 02:00 daily. One run at a time, no backfill of missed runs, enabled. With --compile "
        "--format argo: export an Argo CronWorkflow (compiled/train.cron.yaml) instead; Argo's cron has 5 fields "
        "(no seconds: '0 2 * * *'), and a KFP cron whose seconds are 0 is converted",
    )
    parser.add_argument(
        "--timezone",
        default="",
        metavar="TZ",
        help="--compile --format argo --schedule: the IANA time zone the CronWorkflow's schedule is read in, "
        "e.g. Europe/Berlin (default: the Argo controller's, usually UTC)",
    )
    parser.add_argument(
        "--format",
        choices=COMPILE_FORMATS,
        default="kfp",
        help="--compile: kfp = KFP pipeline IR (compiled/train.yaml); argo = a plain Argo Workflow "
        "(compiled/train.argo.yaml) for clusters with Argo Workflows and no KFP (default: %(default)s)",
    )
    parser.add_argument(
        "--host",
        default=os.environ.get(kfp_client.HOST_ENV),
        metavar="URL",
        help="--run/--schedule: the KFP API, e.g. http://localhost:8080 after `kubectl port-forward -n "
        "kubeflow svc/ml-pipeline-ui 8080:80` (default: $KF_PIPELINES_ENDPOINT). A bearer token is read "
        "from $KF_PIPELINES_TOKEN",
    )
    parser.add_argument(
        "--experiment",
        default=kfp_client.DEFAULT_EXPERIMENT,
        help="--run/--schedule: KFP experiment, created if missing (default: %(default)s)",
    )
    parser.add_argument("--run-name", help="--run: the run's name (default: tfk8s-train <UTC time>)")
    parser.add_argument(
        "--wait",
        nargs="?",
        const=kfp_runs.DEFAULT_WAIT_S,
        type=_seconds,
        metavar="SECONDS",
        help="--run: wait for the run to end (at most SECONDS, default %(const)g), print its state and, if it "
        "failed, each failed step and why; exit 1 unless it succeeded",
    )
    parser.add_argument(
        "--schedule-name", help="--schedule: the recurring run's name (default: tfk8s-train [<cron>]); the "
        "recurring runs of that name in the experiment are replaced (deleted once the new one exists)"
    )
    parser.add_argument(
        "--upload",
        action="store_true",
        help="--run/--schedule: register the package as a pipeline version (Pipelines page; one version per "
        "package content) and run that, instead of embedding it in the run",
    )
    parser.add_argument(
        "--package",
        metavar="PATH",
        help="--run/--schedule: submit this compiled package instead of compiling the pipeline now",
    )
    parser.add_argument(
        "--kfp-namespace", help="--run/--schedule: the KFP profile namespace (multi-user Kubeflow)"
    )
    parser.add_argument(
        "--run-service-account",
        metavar="NAME",
        help="--run/--schedule: the ServiceAccount the run's pods use; the launch step needs the Role of "
        "manifests/rbac.yaml, e.g. tfk8s-launcher (default: the KFP installation's, e.g. pipeline-runner)",
    )


def check_mode(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """After ``parser.parse_args``: exactly one of --compile, --local, --run, --schedule, except that --schedule
    goes with --compile --format argo (the CronWorkflow export). Exits through ``parser.error`` (usage + one line)."""
    given = [m for m in MODES if getattr(args, m, None) not in (None, False)]
    if not given:
        parser.error("one of the arguments --compile --local --run --schedule is required")
    if getattr(args, "wait", None) is not None and given != ["run"]:
        parser.error("--wait applies to --run (a recurring run's runs are followed in the KFP UI)")
    if "schedule" in given and len(given) > 1:
        if given != ["compile", "schedule"]:
            parser.error(f"--schedule is not allowed with --{' --'.join(g for g in given if g != 'schedule')}")
        if getattr(args, "format", "kfp") != "argo":
            parser.error("--compile --schedule exports an Argo CronWorkflow: add --format argo (a KFP recurring "
                         "run is --schedule CRON --host URL, without --compile)")


def _is_default_output(output: str | None, compile_fn: Callable) -> bool:
    """True if ``--output`` was left at the KFP package's default (so ``--format argo`` uses its own)."""
    if not output:
        return True
    try:
        default = inspect.signature(compile_fn).parameters["output"].default
    except (KeyError, TypeError, ValueError):
        return False
    return default is not inspect.Parameter.empty and Path(output).resolve() == Path(default).resolve()


@contextlib.contextmanager
def _package(args: argparse.Namespace, compile_fn: Callable) -> Iterator[Path]:
    if args.package:
        yield Path(args.package)
        return
    with tempfile.TemporaryDirectory(prefix="tfk8s-") as tmp:
        yield Path(compile_fn(Path(tmp) / "train.yaml"))


def handle(args: argparse.Namespace, compile_fn: Callable[[Path], Path], components: Any = None) -> bool:
    """Run ``--run``, ``--schedule`` or ``--compile --format argo``; returns False for anything else (train.py
    then does ``--compile`` (kfp) and ``--local`` itself).

    Args:
        args: train.py's parsed arguments (with ``compile``, ``output``, ``param`` and the flags added above).
        compile_fn: ``compile_pipeline(output) -> Path``, writing the KFP package.
        components: the ``components`` package (the Argo export maps each component to its CLI, :mod:`tfk8s.submit.argo`).

    Raises:
        SystemExit: with a one-line ``error: ...`` for every expected failure (bad parameter, cron, host,
            server answer, untranslatable pipeline), so the user sees the fix, not a traceback.
    """
    fmt = getattr(args, "format", "kfp")
    run, schedule = getattr(args, "run", False), getattr(args, "schedule", None)
    compiling = getattr(args, "compile", False)
    timezone = getattr(args, "timezone", "") or ""
    try:
        if run or (schedule is not None and not compiling):  # --schedule '' is a malformed cron, never a local run
            if timezone:
                raise SystemExit(
                    "error: --timezone applies to the Argo CronWorkflow (--compile --format argo --schedule); a "
                    "KFP recurring run follows its scheduler's time zone (usually UTC)"
                )
            if fmt != "kfp":
                raise SystemExit(
                    "error: --format argo applies to --compile only; submit that file with `argo submit`"
                )
            if schedule is not None:
                validate_cron(schedule)
            params = parse_param_items(getattr(args, "param", None) or [])
            host = kfp_client.normalize_host(args.host)
            common = {
                "params": params,
                "experiment": args.experiment,
                "upload": args.upload,
                "namespace": args.kfp_namespace,
                "service_account": getattr(args, "run_service_account", None),
            }
            with _package(args, compile_fn) as package:
                if run:
                    r = kfp_client.submit_run(host, package, run_name=args.run_name, **common)
                    print(f"tfk8s: started run {r.run_id} in experiment {args.experiment!r}\n  {r.url}", flush=True)
                    wait_s = getattr(args, "wait", None)
                    if wait_s is not None:
                        done = kfp_runs.wait_run(
                            host, r.run_id, timeout_s=wait_s,
                            on_state=lambda state: print(f"tfk8s: run {r.run_id} {state}", flush=True))
                        if done.state != "SUCCEEDED":
                            raise SystemExit(f"error: {done.describe()}")
                else:
                    s = kfp_client.create_schedule(host, package, schedule, name=args.schedule_name, **common)
                    replaced = (f", replacing {', '.join(s.replaced)} of the same name (deleted)"
                                if s.replaced else "")
                    for old_id, going in s.disabled:
                        replaced += (f"; {old_id} of the same name disabled, not deleted: its run "
                                     f"{', '.join(going)} is going (deleting a recurring run stops its runs); "
                                     f"delete it in the KFP UI once that run has ended")
                    print(
                        f"tfk8s: created recurring run {s.name!r} ({s.recurring_run_id}) in experiment "
                        f"{args.experiment!r}: cron {s.cron!r} (scheduler's time zone, usually UTC), one run at "
                        f"a time, no backfill{replaced}\n  {s.url}"
                    )
            return True
    except (KfpClientError, FileNotFoundError, TimeoutError) as e:
        raise SystemExit(f"error: {e}") from None
    if fmt == "argo":
        if not compiling:
            raise SystemExit("error: --format applies to --compile")
        from tfk8s.submit.argo import DEFAULT_CRON_OUTPUT, DEFAULT_OUTPUT, ArgoExportError, compile_argo

        default = DEFAULT_OUTPUT if schedule is None else DEFAULT_CRON_OUTPUT
        output = default if _is_default_output(getattr(args, "output", None), compile_fn) else args.output
        if components is None:
            raise SystemExit("error: the Argo export needs the components package (pipelines/train.py passes it)")
        try:
            if schedule is not None:  # before compiling: a bad cron or zone is said at once
                argo_schedule(schedule)
                check_timezone(timezone)
            elif timezone:
                raise SystemExit("error: --timezone applies to a schedule: add --schedule CRON")
            with tempfile.TemporaryDirectory(prefix="tfk8s-") as tmp:
                path = compile_argo(output, source=compile_fn(Path(tmp) / "train.yaml"), components=components,
                                    schedule=schedule, timezone=timezone)
        except (ArgoExportError, KfpClientError) as e:
            raise SystemExit(f"error: {e}") from None
        if schedule is None:
            print(f"compiled the pipeline to {path} (an Argo Workflow; submit with `argo submit {path}`)")
        else:
            print(f"compiled the pipeline to {path} (an Argo CronWorkflow, schedule {argo_schedule(schedule)!r}"
                  f"{' in ' + timezone if timezone else ''}, one run at a time, no catch-up; create it with "
                  f"`argo cron create {path}`)")
        return True
    if timezone:
        raise SystemExit("error: --timezone applies to --compile --format argo --schedule")
    return False
