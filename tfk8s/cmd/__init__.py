"""The ``tfk8s`` command: see, follow, wait for and stop training jobs, local or on Kubernetes.

::

    tfk8s get [-o wide|json|yaml]            a table of the jobs: replicas ready/total, state, progress...
    tfk8s describe JOB [-o json|yaml]        replicas and TF_CONFIG, restarts and why, paths, events last
    tfk8s logs JOB [REPLICA] [-f]            a replica's whole log (every replica's, prefixed, without one)
    tfk8s wait JOB [--timeout S]             until it ends; exit 0 Succeeded, 1 Failed, 5 Stopped/Deleted, 3 timed out
    tfk8s delete JOB                         stop a running job (its files stay on the volume)
    tfk8s report RUN                         write the run's HTML report (curves, confusion matrix...)
    tfk8s datasets [delete KEY]              the prepared data sets: size, the runs that read them; delete one
    tfk8s run [ARGS...]                      python pipelines/train.py --local ARGS (source checkout only)

Jobs are read from the job records on the volume (``--volume DIR``, default ``./volume``, the folder
``pipelines/train.py --local`` uses; in a cluster, the PVC's mount path): :mod:`tfk8s.tracking.records`. With
``-n/--namespace`` (or for a job recorded as a Kubernetes one) the cluster is asked too: live replicas are
found by the label ``tfk8s.dev/job-name``, logs read from their pods while the volume has none. Results go
to stdout, diagnostics to stderr; nothing is coloured. Exit codes: 0 ok, 1 failed (``wait``: the job
failed), 3 ``wait`` timed out, 4 no such job, 5 ``wait``: the job was stopped by someone (``Stopped``: Ctrl-C, a
cancelled run; ``Deleted``: ``tfk8s delete``).

One module per verb, each with kubectl's shape: ``add_parser`` (its flags), and ``Options`` with ``complete``
(from the parsed flags), ``validate`` and ``run``; what they share is :mod:`tfk8s.cmd.context`.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable
from typing import Any

from tfk8s.cmd import datasets, delete, describe, get, logs, report, run, wait
from tfk8s.cmd.context import (
    EXIT_FAILED,
    EXIT_NOT_FOUND,
    EXIT_OK,
    EXIT_STOPPED,
    EXIT_TIMEOUT,
    Context,
    CtlError,
)

__all__ = ["EXIT_FAILED", "EXIT_NOT_FOUND", "EXIT_OK", "EXIT_STOPPED", "EXIT_TIMEOUT", "build_parser", "entry_point",
           "main"]
VERBS = {"get": get, "describe": describe, "logs": logs, "wait": wait, "delete": delete, "report": report,
         "datasets": datasets, "run": run}


def build_parser() -> argparse.ArgumentParser:
    """The ``tfk8s`` argument parser (``tfk8s --help``): the common flags, then each verb's."""
    p = argparse.ArgumentParser(prog="tfk8s", description=__doc__.split("\n\n")[0].replace("``", ""),
                                epilog="Exit codes: 0 ok, 1 failed, 3 wait timed out, 4 no such job, "
                                       "5 wait: stopped or deleted.")
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--volume", default="volume",
                        help="folder standing for the shared volume (default: ./volume, as pipelines/train.py "
                             "--local); in a cluster the PVC's mount path")
    common.add_argument("-n", "--namespace", default="", help="also ask the cluster, in this namespace")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for module in VERBS.values():
        module.add_parser(sub, common)
    return p


def main(argv: list[str] | None = None, *, kube_api: Callable[[str], Any] | None = None) -> int:
    """Run one ``tfk8s`` command: parse, complete, validate, run; returns its exit code (see the module
    docstring). ``kube_api(namespace)`` gives the cluster's API (tests); default: the kubeconfig's."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["run"]:  # everything after `run` is pipelines/train.py's, --help included
        args = argparse.Namespace(command="run", args=argv[1:], volume="volume", namespace="")
    else:
        args = build_parser().parse_args(argv)
    try:
        options = VERBS[args.command].Options.complete(args)
        options.validate()
        return options.run(Context(args.volume, args.namespace, kube_api))
    except CtlError as e:
        print(f"tfk8s: error: {e}", file=sys.stderr)
        return e.code
    except KeyboardInterrupt:
        return 130


def entry_point() -> None:
    """The ``tfk8s`` console script."""
    try:
        code = main()
    except BrokenPipeError:  # `tfk8s logs JOB | head`: the reader has gone, which is fine
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        code = EXIT_OK
    raise SystemExit(code)
