"""Submit the compiled pipeline to a Kubeflow Pipelines (v2) API: one run now, or a recurring (cron) run.

Everything that can be checked locally is checked before the first request: the host URL, the cron
expression (KFP's 6 fields, :mod:`tfk8s.submit.cron`), and the parameters against the inputs the compiled
package declares (:mod:`tfk8s.submit.pipeline_inputs`). Then one
short health probe (``GET /apis/v2beta1/healthz``, a few seconds, no retries) tells an unreachable or wrong
host, or a login redirect, apart from everything else, in one line instead of kfp's retries and traceback.
The requests themselves are made by :class:`kfp.Client`:

- :func:`submit_run`: get or create the experiment, then ``POST /apis/v2beta1/runs`` with the pipeline spec
  embedded (default), or with ``upload=True`` register the package as a pipeline version (``POST
  /apis/v2beta1/pipelines/upload`` the first time, ``.../upload_version`` after; a version per package
  content, reused when unchanged) and run that version;
- :func:`create_schedule`: the same, then ``POST /apis/v2beta1/recurringruns`` with the defaults a team
  retraining nightly wants: one run at a time (``max_concurrency=1``), no backfill of missed runs after a
  pause or outage (``no_catchup=True``), enabled. Idempotent by name: the recurring runs of the same name in
  the same experiment (``GET /apis/v2beta1/recurringruns``) are deleted once the new one exists, so running
  ``--schedule`` again with new parameters replaces the schedule instead of adding a second one.

Auth: a bearer token from ``token=`` or the ``KF_PIPELINES_TOKEN`` environment variable (tfk8s's name; kfp
itself reads no token variable) is passed to kfp as ``existing_token``; otherwise kfp's own mechanisms apply
(cookies/headers in ``~/.config/kfp/context.json``; in a pod, the projected ServiceAccount token).
The host defaults to ``KF_PIPELINES_ENDPOINT``, as in kfp.
"""

from __future__ import annotations

import contextlib
import datetime
import hashlib
import io
import json
import os
import re
import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tfk8s.submit.cron import validate_cron
from tfk8s.submit.errors import KfpApiError, KfpClientError, KfpUnreachableError
from tfk8s.submit.pipeline_inputs import read_package, resolve_params

TOKEN_ENV = "KF_PIPELINES_TOKEN"
HOST_ENV = "KF_PIPELINES_ENDPOINT"  # kfp's own variable for the API endpoint
DEFAULT_EXPERIMENT = "tfk8s"
DEFAULT_TIMEOUT_S = 5.0
HEALTHZ_PATH = "/apis/v2beta1/healthz"
FINAL_STATES = ("SUCCEEDED", "FAILED", "CANCELED", "SKIPPED")  # a v2beta1 run's states that never change again


# --- the client ----------------------------------------------------------------------------------------------


def normalize_host(host: str | None) -> str:
    """``host`` (or ``$KF_PIPELINES_ENDPOINT``) without a trailing slash.

    Raises:
        KfpClientError: no host, or no ``http://``/``https://`` scheme.
    """
    host = (host or os.environ.get(HOST_ENV) or "").strip().rstrip("/")
    if not host:
        raise KfpClientError(
            f"no KFP host: pass --host URL (or set {HOST_ENV}), e.g. http://localhost:8080 after "
            f"`kubectl port-forward -n kubeflow svc/ml-pipeline-ui 8080:80`"
        )
    if not re.match(r"^https?://[^/\s]+", host):
        raise KfpClientError(f"KFP host {host!r} needs a scheme and a host name, e.g. http://localhost:8080")
    return host


def check_reachable(host: str, token: str | None = None, timeout_s: float = DEFAULT_TIMEOUT_S) -> None:
    """One ``GET <host>/apis/v2beta1/healthz`` without retries or redirects, to fail fast and clearly.

    Raises:
        KfpUnreachableError: refused, unknown host name, TLS failure or no answer within ``timeout_s`` seconds.
        KfpApiError: an answer that is not the KFP API (404), needs auth (401/403, or a redirect to a login
            page), or a server error.
    """
    import certifi
    import urllib3

    url = host + HEALTHZ_PATH
    headers = {"Accept": "application/json"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    pool = urllib3.PoolManager(cert_reqs="CERT_REQUIRED", ca_certs=certifi.where())
    try:
        r = pool.request(
            "GET",
            url,
            headers=headers,
            retries=False,
            redirect=False,
            timeout=urllib3.Timeout(connect=timeout_s, read=timeout_s),
        )
    except urllib3.exceptions.HTTPError as e:
        if isinstance(e, urllib3.exceptions.NameResolutionError):
            why = "unknown host name"
        elif isinstance(e, urllib3.exceptions.NewConnectionError):  # refused, no route, ...
            why = str(e).rsplit("] ", 1)[-1].lower() if "] " in str(e) else "cannot connect"
        elif isinstance(e, (urllib3.exceptions.ConnectTimeoutError, urllib3.exceptions.ReadTimeoutError)):
            why = f"no answer within {timeout_s:g} s"
        elif isinstance(e, urllib3.exceptions.SSLError):
            why = "TLS handshake failed"
        else:
            why = type(e).__name__
        raise KfpUnreachableError(
            f"cannot reach the KFP API at {host} ({why}). Check --host; for a cluster: "
            f"`kubectl port-forward -n kubeflow svc/ml-pipeline-ui 8080:80` and --host http://localhost:8080"
        ) from None
    if r.status in (301, 302, 303, 307, 308):
        raise KfpApiError(
            f"KFP API at {host} redirects to {r.headers.get('Location', '?')} (a login page?): pass a token "
            f"in {TOKEN_ENV}, or use an endpoint that needs none (the ml-pipeline-ui service)"
        )
    if r.status in (401, 403):
        raise KfpApiError(f"KFP API at {host} answered {r.status}: set {TOKEN_ENV} to a valid bearer token")
    if r.status == 404:
        raise KfpApiError(
            f"no KFP v2 API at {host} (GET {HEALTHZ_PATH} -> 404): point --host at the KFP UI/API endpoint, "
            f"e.g. http://localhost:8080 for a port-forwarded ml-pipeline-ui, or https://<kubeflow>/pipeline"
        )
    if r.status >= 400:
        raise KfpApiError(f"KFP API at {host} answered {r.status} to GET {HEALTHZ_PATH}: {r.data[:200]!r}")


def kfp_api_client(host: str, token: str | None, namespace: str | None = None):
    """A :class:`kfp.Client` for ``host`` (token as ``existing_token``; namespace default ``kubeflow``)."""
    import kfp

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)  # "only works with KFP v2.0.0-beta.2 and later"
        return kfp.Client(host=host, existing_token=token or None, namespace=namespace or "kubeflow")


@contextlib.contextmanager
def api_errors(host: str, what: str):
    """Inside: kfp's ApiException becomes :class:`KfpApiError` (status, reason, the server's message), a lost
    connection :class:`KfpUnreachableError`, both saying ``what`` failed."""
    import kfp_server_api
    import urllib3

    try:
        yield
    except kfp_server_api.ApiException as e:
        detail = e.body
        with contextlib.suppress(Exception):
            detail = json.loads(e.body).get("message") or e.body
        raise KfpApiError(
            f"{what} failed: KFP API at {host} answered {e.status} {e.reason}: {detail}"
        ) from None
    except urllib3.exceptions.HTTPError as e:
        raise KfpUnreachableError(f"{what} failed: lost the KFP API at {host} ({type(e).__name__})") from None


@dataclass(frozen=True)
class SubmittedRun:
    """A started run: its id, experiment id, UI URL, and the pipeline (version) ids when uploaded."""
    run_id: str
    experiment_id: str
    url: str
    pipeline_id: str | None = None
    version_id: str | None = None


@dataclass(frozen=True)
class CreatedSchedule:
    """A created recurring run: its id, name, cron, experiment id and UI URL; ``replaced``: the ids of the
    recurring runs of the same name in the same experiment it replaced (deleted), oldest first."""
    recurring_run_id: str
    experiment_id: str
    name: str
    cron: str
    url: str
    pipeline_id: str | None = None
    version_id: str | None = None
    replaced: tuple[str, ...] = ()
    disabled: tuple[tuple[str, tuple[str, ...]], ...] = ()
    """Recurring runs of the same name disabled instead of deleted, each with the ids of its runs still going:
    deleting a recurring run deletes the Workflow of a run it started (its ScheduledWorkflow owns it), which
    would stop that run and leave it RUNNING in KFP's API forever."""


def uncached_tasks(spec: Mapping[str, Any]) -> list[str]:
    """The steps of a compiled pipeline (its IR dict) whose caching is off (``cachingOptions`` without
    ``enableCache: true``), in the root DAG and in every sub-DAG (``dsl.If`` branches), sorted, each once; the
    branches themselves (components without an executor) are not steps."""
    components = spec.get("components") or {}
    dags = [spec.get("root") or {}, *components.values()]
    names = {name for dag in dags for name, task in (((dag.get("dag") or {}).get("tasks")) or {}).items()
             if not (task.get("cachingOptions") or {}).get("enableCache")
             and "executorLabel" in components.get((task.get("componentRef") or {}).get("name"), {})}
    return sorted(names)


def refuse_forced_caching(spec: Mapping[str, Any], enable_caching: bool | None) -> None:
    """``enable_caching=True`` at submit turns KFP's cache on for every step, whatever the pipeline compiled
    (kubeflow/pipelines#10676): refused when some step has caching off on purpose.

    Raises:
        KfpClientError: one line naming those steps and the fix (leave ``enable_caching`` unset).
    """
    off = uncached_tasks(spec) if enable_caching else []
    if off:
        raise KfpClientError(
            f"enable_caching=True would serve every step from KFP's cache (it overrides the compiled caching "
            f"options, kubeflow/pipelines#10676), but {', '.join(off)} must run each time: their data, checkpoints "
            f"and models are on the volume, which the cache does not see (a cached launch trains nothing); leave "
            f"enable_caching unset")


def _prepare(host, package_path, params, token):
    host = normalize_host(host)
    typed = resolve_params(package_path, params)
    token = token if token is not None else os.environ.get(TOKEN_ENV)
    return host, typed, token


def quiet(fn, *args, **kwargs):
    """Call a kfp.Client method without its "... details: <link>" prints (we print our own line)."""
    with contextlib.redirect_stdout(io.StringIO()):
        return fn(*args, **kwargs)


def upload_version(client, package_path: str | os.PathLike, pipeline_name: str) -> tuple[str, str]:
    """Register the package as a version of pipeline ``pipeline_name``; returns ``(pipeline_id, version_id)``.

    Every version is named ``<pipeline>-<first 12 hex of the package's sha256>`` and reused when a version of
    that name exists, so submitting an unchanged package twice does not pile up versions; a changed package
    adds one. A new pipeline is created without a version first (``POST /apis/v2beta1/pipelines``): KFP's
    upload of a new pipeline would name its first version after the pipeline, which the next upload of the same
    package could not recognise (a real KFP 2.17.0 made a second version of an unchanged package that way).
    """
    import kfp_server_api

    package = str(package_path)
    pipeline_id = client.get_pipeline_id(pipeline_name)
    if pipeline_id is None:
        pipeline_id = client._pipelines_api.pipeline_service_create_pipeline(
            kfp_server_api.V2beta1Pipeline(display_name=pipeline_name)
        ).pipeline_id
    version_name = f"{pipeline_name}-{hashlib.sha256(Path(package).read_bytes()).hexdigest()[:12]}"
    same = json.dumps(
        {"predicates": [{"operation": "EQUALS", "key": "display_name", "stringValue": version_name}]}
    )
    existing = client.list_pipeline_versions(pipeline_id, page_size=1, filter=same).pipeline_versions
    if existing:
        return pipeline_id, existing[0].pipeline_version_id
    version = quiet(client.upload_pipeline_version, package, version_name, pipeline_id=pipeline_id)
    return pipeline_id, version.pipeline_version_id


def submit_run(
    host: str | None,
    package_path: str | os.PathLike,
    params: Mapping[str, Any] | None = None,
    experiment: str = DEFAULT_EXPERIMENT,
    run_name: str | None = None,
    *,
    upload: bool = False,
    pipeline_name: str | None = None,
    namespace: str | None = None,
    service_account: str | None = None,
    enable_caching: bool | None = None,
    token: str | None = None,
    timeout_s: float = DEFAULT_TIMEOUT_S,
) -> SubmittedRun:
    """Start one run of the compiled pipeline.

    Args:
        host: the KFP API/UI URL, e.g. ``http://localhost:8080`` (default: ``$KF_PIPELINES_ENDPOINT``).
        package_path: the compiled pipeline (``compiled/train.yaml``).
        params: pipeline parameters, checked and parsed against the package's declared inputs.
        experiment: experiment name, created if missing.
        run_name: the run's display name (default: ``<pipeline> <UTC time>``).
        upload: register the package as a pipeline version and run that version (shows in the Pipelines
            page), instead of embedding the spec in the run.
        pipeline_name: the pipeline's name for ``upload`` (default: the package's ``pipelineInfo.name``).
        namespace: the KFP profile namespace (multi-user Kubeflow).
        service_account: the Kubernetes ServiceAccount the run's pods use (default: KFP's).
        enable_caching: override the compiled caching options (None: as compiled); True is refused when a step
            has caching off (:func:`refuse_forced_caching`).
        token: bearer token (default: ``$KF_PIPELINES_TOKEN``).
        timeout_s: seconds the reachability probe waits.

    Raises:
        ParameterError, KfpClientError, FileNotFoundError: before any request (``enable_caching=True`` for a
        pipeline with steps that must not be cached, too); KfpUnreachableError, KfpApiError: from the server.
    """
    host, typed, token = _prepare(host, package_path, params, token)
    spec = read_package(package_path)
    refuse_forced_caching(spec, enable_caching)
    name = pipeline_name or spec["pipelineInfo"]["name"]
    check_reachable(host, token, timeout_s)
    client = kfp_api_client(host, token, namespace)
    pipeline_id = version_id = None
    with api_errors(host, f"submitting {package_path}"):
        exp = quiet(client.create_experiment, experiment, namespace=namespace)
        if upload:
            pipeline_id, version_id = upload_version(client, package_path, name)
        run = quiet(
            client.run_pipeline,
            experiment_id=exp.experiment_id,
            job_name=run_name or f"{name} {datetime.datetime.now(datetime.UTC):%Y-%m-%d %H:%M:%S}",
            pipeline_package_path=None if upload else str(package_path),
            pipeline_id=pipeline_id,
            version_id=version_id,
            params=typed,
            enable_caching=enable_caching,
            service_account=service_account,
        )
    return SubmittedRun(
        run.run_id, exp.experiment_id, f"{host}/#/runs/details/{run.run_id}", pipeline_id, version_id
    )


def recurring_runs_named(client, experiment_id: str, name: str) -> list[str]:
    """The ids of the recurring runs named ``name`` in experiment ``experiment_id`` (every page), oldest first.

    ``client``: a :class:`kfp.Client`. The server filters on ``display_name``; the names are checked again here,
    so a server that ignores the filter never makes another schedule look like this one.
    """
    same = json.dumps({"predicates": [{"operation": "EQUALS", "key": "display_name", "stringValue": name}]})
    ids, token = [], ""
    while True:
        page = client.list_recurring_runs(page_token=token, page_size=100, sort_by="created_at",
                                          experiment_id=experiment_id, filter=same)
        ids += [r.recurring_run_id for r in (page.recurring_runs or []) if r.display_name == name]
        token = page.next_page_token or ""
        if not token:
            return ids


def runs_going(client, experiment_id: str, recurring_run_id: str) -> list[str]:
    """The ids of the runs recurring run ``recurring_run_id`` started in experiment ``experiment_id`` that are
    not in a final state (:data:`FINAL_STATES`), among the experiment's newest 100 runs (a schedule's runs in
    flight are its newest). ``client``: a :class:`kfp.Client`."""
    page = client.list_runs(experiment_id=experiment_id, page_size=100, sort_by="created_at desc")
    return [r.run_id for r in (page.runs or [])
            if r.recurring_run_id == recurring_run_id and str(r.state or "") not in FINAL_STATES]


def create_schedule(
    host: str | None,
    package_path: str | os.PathLike,
    cron: str,
    params: Mapping[str, Any] | None = None,
    experiment: str = DEFAULT_EXPERIMENT,
    *,
    name: str | None = None,
    max_concurrency: int = 1,
    no_catchup: bool = True,
    enabled: bool = True,
    upload: bool = False,
    pipeline_name: str | None = None,
    namespace: str | None = None,
    service_account: str | None = None,
    enable_caching: bool | None = None,
    token: str | None = None,
    timeout_s: float = DEFAULT_TIMEOUT_S,
) -> CreatedSchedule:
    """Create a recurring run of the compiled pipeline on a KFP cron schedule, replacing the recurring runs of
    the same name in the same experiment (never a second schedule of one name: the model would be trained twice
    a night).

    Replacing: the new recurring run is created first, then the old ones are deleted (``DELETE
    /apis/v2beta1/recurringruns/<id>``), so a refused creation (a bad parameter the server rejects) leaves the
    old schedule running. An old one with a run still going (:func:`runs_going`) is disabled instead (``POST
    .../<id>:disable``) and named in :attr:`CreatedSchedule.disabled`: deleting it would delete that run's Workflow
    (its ScheduledWorkflow owns it; seen on KFP 2.17.0: the run stopped and stayed RUNNING in the API). The
    default name includes the cron, so ``--schedule-name`` keeps one schedule across a change of cron.

    Defaults are those of nightly retraining: ``max_concurrency=1`` (a slow run delays the next instead of two
    trainings competing for the cluster and the volume), ``no_catchup=True`` (after a pause or outage, run
    once, not once per missed night), enabled.

    Args:
        cron: 6 fields, ``seconds minutes hours day-of-month month day-of-week``, e.g. ``0 0 2 * * *`` for
            02:00 daily (scheduler's time zone, usually UTC); validated before any request.
        name: the recurring run's display name (default: ``<pipeline> [<cron>]``).
        Others: as :func:`submit_run`.

    Returns:
        :class:`CreatedSchedule`, with the ids of the recurring runs it replaced (deleted) and disabled.

    Raises:
        CronError, ParameterError, KfpClientError, FileNotFoundError: before any request;
        KfpUnreachableError, KfpApiError: from the server.
    """
    cron = validate_cron(cron)
    if max_concurrency < 1:
        raise KfpClientError(f"max_concurrency={max_concurrency}: must be >= 1 (1: one run at a time)")
    host, typed, token = _prepare(host, package_path, params, token)
    spec = read_package(package_path)
    refuse_forced_caching(spec, enable_caching)
    pipeline = pipeline_name or spec["pipelineInfo"]["name"]
    display = name or f"{pipeline} [{cron}]"
    check_reachable(host, token, timeout_s)
    client = kfp_api_client(host, token, namespace)
    pipeline_id = version_id = None
    with api_errors(host, f"scheduling {package_path}"):
        exp = quiet(client.create_experiment, experiment, namespace=namespace)
        if upload:
            pipeline_id, version_id = upload_version(client, package_path, pipeline)
        old = recurring_runs_named(client, exp.experiment_id, display)
        job = client.create_recurring_run(
            experiment_id=exp.experiment_id,
            job_name=display,
            description=f"tfk8s: {pipeline} on cron '{cron}' (max {max_concurrency} at a time, "
            f"{'no ' if no_catchup else ''}catch-up)",
            cron_expression=cron,
            max_concurrency=max_concurrency,
            no_catchup=no_catchup,
            enabled=enabled,
            params=typed,
            pipeline_package_path=None if upload else str(package_path),
            pipeline_id=pipeline_id,
            version_id=version_id,
            enable_caching=enable_caching,
            service_account=service_account,
        )
    rid = job.recurring_run_id
    deleted: list[str] = []
    disabled: list[tuple[str, tuple[str, ...]]] = []
    with api_errors(host, f"replacing the recurring runs named {display!r} ({', '.join(old)}) by {rid}"):
        for old_id in old:
            if old_id == rid:
                continue
            if going := runs_going(client, exp.experiment_id, old_id):
                client.disable_recurring_run(old_id)
                disabled.append((old_id, tuple(going)))
            else:
                client.delete_recurring_run(old_id)
                deleted.append(old_id)
    return CreatedSchedule(rid, exp.experiment_id, display, cron, f"{host}/#/recurringrun/details/{rid}",
                           pipeline_id, version_id, tuple(deleted), tuple(disabled))
