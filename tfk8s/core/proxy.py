"""A job's own traffic never goes through a proxy: the ``NO_PROXY`` variables every replica gets.

Corporate clusters inject ``http_proxy``/``https_proxy`` into pods, images set them, laptops have them. gRPC
honours them for every channel it opens (``grpc_proxy``, then ``https_proxy``, then ``http_proxy``), so the
replicas' own connections to each other (the collectives of MultiWorkerMirroredStrategy, the coordination
service, a ParameterServerStrategy chief's calls) go to the proxy, which never answers them: the job hangs at
"replicas 2/2 up" (tensorflow#24887; measured here: a 2-worker local run with ``http_proxy`` pointing at a port
that accepts and never answers hung in MultiWorkerMirroredStrategy's constructor, every replica ``starting``,
until the job deadline). gRPC skips the proxy for hosts listed in ``no_grpc_proxy``, or else in ``no_proxy``
(suffix match on host names); Python's ``urllib``/``requests`` read ``no_proxy``/``NO_PROXY``.

:func:`no_proxy_env` gives all three variables the same value: what the user set in any of them, kept, then
the job's peer hosts. Both backends call it where a replica's environment is assembled (local: ``127.0.0.1`` and
``localhost``; Kubernetes: every replica's Service host, the namespace's ``.svc`` domain and the cluster
domain, :mod:`tfk8s.launcher.kubernetes.objects`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

NO_PROXY_VARS = ("NO_PROXY", "no_proxy", "no_grpc_proxy")
"""The variables that exempt hosts from a proxy: Python's and most tools' (both spellings) and gRPC's own."""
LOCAL_HOSTS = ("127.0.0.1", "localhost")
"""The peer hosts of a local job (every replica on the loopback)."""


def no_proxy_env(hosts: Iterable[str], *given: Mapping[str, str]) -> dict[str, str]:
    """``NO_PROXY``, ``no_proxy`` and ``no_grpc_proxy`` for a replica whose peers are ``hosts``.

    Args:
        hosts: host names, domain suffixes (``.ns.svc``) or addresses the replicas reach each other by.
        given: the environments the replica's comes from, in order (the launcher's, the job's ``env``, a
            replica type's ``env``); the entries of their :data:`NO_PROXY_VARS` come first, each once.

    Returns:
        The three variables, each ``"<the user's entries>,<hosts>"`` without duplicates (comma-separated,
        blanks dropped).
    """
    entries: list[str] = []
    for env in given:
        for var in NO_PROXY_VARS:
            entries += [e.strip() for e in (env.get(var) or "").split(",")]
    entries += [h.strip() for h in hosts]
    value = ",".join(dict.fromkeys(e for e in entries if e))
    return dict.fromkeys(NO_PROXY_VARS, value)
