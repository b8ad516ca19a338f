"""Command-line flags of the Kubernetes settings, generated from :class:`~tfk8s.kube.settings.KubernetesParams`
(the one definition of their names, defaults and help): field ``replica_overrides`` is the flag
``--replica-overrides '{"ps": {"cpu": "500m"}}'``; structured values (objects, lists) are JSON strings.
The PVC's mount path has no flag: it is the launch step's ``--volume-root`` (``/mnt/tfk8s`` in a cluster), so
the replicas see the volume where the pipeline's steps do.
"""

from __future__ import annotations

import argparse
from typing import Any

from tfk8s.cli import boolean
from tfk8s.kube.settings import KubernetesParams, KubernetesSettings


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def add_kubernetes_arguments(parser: argparse.ArgumentParser, *, skip: tuple[str, ...] = (),
                             unset_default: bool = False) -> None:
    """Add one flag per :class:`KubernetesParams` field (``--namespace ... --scheduler-name``) to ``parser``,
    in their own group.

    Args:
        skip: fields to leave out (a parser that has them as flags of its own).
        unset_default: defaults are None (not given) instead of the fields' defaults, so
            :func:`kubernetes_params_from_args` returns only the flags given.
    """
    group = parser.add_argument_group("kubernetes backend")
    for name, default in KubernetesParams.defaults().items():
        if name in skip:
            continue
        structured = isinstance(default, dict | list)
        kind = str if structured else boolean if isinstance(default, bool) else type(default)
        shown = "" if structured else default
        help_text = KubernetesParams.help(name) + (" (JSON)" if structured else "")
        group.add_argument(_flag(name), dest=name, type=kind, default=None if unset_default else shown,
                           help=f"{help_text} (default: {shown!r})")


def kubernetes_params_from_args(args: argparse.Namespace) -> dict[str, Any]:
    """The values of the flags :func:`add_kubernetes_arguments` added, keyed by field name (flags left at a
    None default are left out)."""
    return {name: getattr(args, name) for name in KubernetesParams.names()
            if getattr(args, name, None) is not None}


def settings_from_args(args: argparse.Namespace) -> KubernetesSettings:
    """:meth:`KubernetesSettings.from_params` from parsed flags.

    Raises:
        ValueError: a bad value (the message names the parameter).
    """
    return KubernetesSettings.from_params(**kubernetes_params_from_args(args))
