"""Follow a Kubeflow Pipelines run to its end, and say why it failed.

- :func:`wait_run`: poll ``GET /apis/v2beta1/runs/ID`` (as :meth:`kfp.Client.wait_for_run_completion` does)
  until the run's state is final; for a run that did not succeed, name each failed step and why.
- :func:`run_failures` / :func:`failed_steps`: KFP 2.17's v2 API gives no reason for a failed run (the run's
  ``error`` is set only when the API cannot convert the run, ``apiserver/server/api_converter.go``; its tasks'
  state history carries none), so the reason is read where KFP's own UI reads it: the run's Argo Workflow,
  returned by ``GET /apis/v1beta1/runs/ID`` as ``pipeline_runtime.workflow_manifest`` and kept up to date by
  KFP's persistence agent, whose failed pod nodes carry Argo's message (``<container>: Error (exit code 1):
  <the container's termination message>``). Every tfk8s step writes its error there
  (:func:`tfk8s.steps.cli.failure_reported`, :func:`tfk8s.steps.cli.main_guard`).
"""

from __future__ import annotations

import json
import os
import re
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from tfk8s.submit.errors import KfpApiError, KfpClientError, KfpUnreachableError
from tfk8s.submit.kfp_client import (
    DEFAULT_TIMEOUT_S,
    FINAL_STATES,
    TOKEN_ENV,
    api_errors,
    kfp_api_client,
    normalize_host,
    quiet,
)

RUN_V1_PATH = "/apis/v1beta1/runs/{run_id}"  # the run detail with its Argo Workflow (pipeline_runtime)
DEFAULT_POLL_S = 5.0
DEFAULT_WAIT_S = 6 * 3600.0  # --run --wait without SECONDS


@dataclass(frozen=True)
class FailedStep:
    """A step of a run that failed: its pipeline task name (``launch-training``; a driver's is ``<task> (KFP
    driver)``) and Argo's message for its pod (``main: Error (exit code 1): <termination message>``)."""
    task: str
    message: str


@dataclass(frozen=True)
class FinishedRun:
    """A run in a final state (:data:`FINAL_STATES`); ``failed``: its failed steps, oldest first (empty unless
    the run failed); ``error``: the run's own error as the v2beta1 API gives it, or ``""``."""
    run_id: str
    state: str
    failed: tuple[FailedStep, ...] = ()
    error: str = ""

    def describe(self) -> str:
        """One line per failed step, ``<task>: <message>``, after the state (what ``--run --wait`` prints)."""
        lines = [f"run {self.run_id} {self.state}" + (f": {self.error}" if self.error else "")]
        lines += [f"  {f.task}: {f.message}" for f in self.failed]
        return "\n".join(lines)


_KFP_INNER = {"executor"}  # the inner DAG task of KFP's system-container-executor template (argocompiler)

STEPS_FLAG = "python pipelines/train.py --run --steps"
REFUSALS = (
    # (what the API server's refusal says, why and the fix); the first match wins
    ("exceeded quota", ("the namespace's ResourceQuota has no room left for this step's requests (Argo keeps "
                       "retrying the pod while it waits): free quota, ask for more, or lower the step's requests "
                       "with {flag} '{{\"{step}\": {{\"cpu\": \"100m\", \"memory\": \"512Mi\"}}}}'")),
    ("must specify", ("the namespace's ResourceQuota needs the request or limit it names on every container: set it "
                     "for this step with {flag} (e.g. '{{\"*\": {{\"cpu_limit\": \"1\"}}}}' for limits.cpu); a "
                     "KFP driver's or Argo's own init and wait containers get theirs from the cluster's KFP and "
                     "Argo configuration (docs/kubernetes.md, \"Production clusters\")")),
    ("violates PodSecurity", ("the namespace's Pod Security level refuses the step's pod: label the namespace "
                             "pod-security.kubernetes.io/enforce with a level the steps meet, or run in another "
                             "namespace (--kfp-namespace)")),
    ("forbidden", ("an admission policy refused the step's pod (the message names it): ask the cluster's admins, or "
                  "change the step's pod (requests, limits, labels, annotations) with {flag}")),
)
"""The API server's refusals of a step's pod (Argo's node message) and the fix for each (:func:`refusal_hint`)."""


_POD_REFUSED = re.compile(r'\bpods "[^"]+" is forbidden: ')  # the API server refusing to create a pod


def refusal_hint(task: str, message: str) -> str:
    """The fix for a step's pod that the API server refused (a quota, an admission policy), ``""`` when
    ``message`` is not such a refusal. ``task`` is the pipeline task (``prepare-dataset``), named by its step in
    the ``--steps`` example."""
    if not _POD_REFUSED.search(message):  # a step's own error that mentions a quota is not its pod's refusal
        return ""
    step = task.split(" ")[0].replace("-", "_")
    for marker, hint in REFUSALS:
        if marker in message:
            return hint.format(flag=STEPS_FLAG, step=step)
    return ""


def _refused_pending(node: Mapping[str, Any]) -> bool:
    """A Pod node that Argo keeps Pending because the API server refused its pod (a full quota: Argo retries)."""
    return node.get("phase") == "Pending" and bool(refusal_hint("", str(node.get("message") or "")))


def failed_steps(workflow: Mapping[str, Any]) -> list[FailedStep]:
    """The failed pods of a KFP v2 run's Argo Workflow, named by their pipeline task.

    KFP 2.x's Argo compiler (``backend/src/v2/compiler/argocompiler``) makes each pipeline task ``T`` a DAG task
    ``T`` (template ``system-container-executor``, whose one task ``executor`` is the step's pod) after a driver
    task ``T-driver``; a node's ``name`` is the dotted path of DAG task names below the workflow's name
    (``tfk8s-train-x7k2q.root.condition-1.push-model.executor``).

    Args:
        workflow: an Argo Workflow as JSON (``status.nodes``: node id -> ``name``, ``type``, ``phase``,
            ``message``, ``startedAt``).

    Returns:
        One :class:`FailedStep` per node of type ``Pod`` in phase ``Failed`` or ``Error``, or ``Pending`` with
        the API server's refusal of its pod (a full quota, which Argo retries), oldest first; a pod without a
        message gets its phase. A refusal's message ends with its fix (:func:`refusal_hint`: the cluster's
        message, then ``-- fix: ...``). Empty for a workflow without nodes.
    """
    nodes = (workflow.get("status") or {}).get("nodes") or {}
    out: list[tuple[str, FailedStep]] = []
    for node in nodes.values():
        if node.get("type") != "Pod" or (node.get("phase") not in ("Failed", "Error") and not _refused_pending(node)):
            continue
        path = str(node.get("name") or node.get("displayName") or "?").split(".")
        task = path[-1]
        if task in _KFP_INNER and len(path) > 1:
            task = path[-2]
        elif task.endswith("-driver"):
            task = f"{task[: -len('-driver')]} (KFP driver)"
        message = str(node.get("message") or node["phase"])
        hint = refusal_hint(task, message)
        if node.get("phase") == "Pending":
            message = f"Pending: {message}"
        out.append((str(node.get("startedAt") or ""), FailedStep(task, f"{message} -- fix: {hint}" if hint else message)))
    return [f for _, f in sorted(out, key=lambda x: x[0])]


def _get_json(host: str, path: str, token: str | None, timeout_s: float) -> Any:
    """``GET host+path`` as JSON (with the bearer token); KfpApiError on an error status."""
    import certifi
    import urllib3

    headers = {"Accept": "application/json", **({"Authorization": f"Bearer {token}"} if token else {})}
    pool = urllib3.PoolManager(cert_reqs="CERT_REQUIRED", ca_certs=certifi.where())
    try:
        r = pool.request("GET", host + path, headers=headers, retries=False, redirect=False,
                         timeout=urllib3.Timeout(connect=timeout_s, read=30.0))
    except urllib3.exceptions.HTTPError as e:
        raise KfpUnreachableError(f"GET {path} failed: lost the KFP API at {host} ({type(e).__name__})") from None
    if 300 <= r.status < 400:
        raise KfpApiError(f"GET {path}: KFP API at {host} redirects to {r.headers.get('Location', '?')} (a login "
                          f"page? the session may have expired): pass a token in {TOKEN_ENV}")
    if r.status >= 400:
        raise KfpApiError(f"GET {path} failed: KFP API at {host} answered {r.status}: {r.data[:300]!r}")
    try:
        return json.loads(r.data or b"{}")
    except ValueError:
        raise KfpApiError(f"GET {path}: KFP API at {host} answered {r.status} with no JSON (a login page?): "
                          f"{r.data[:200]!r}") from None


def run_failures(host: str, run_id: str, token: str | None = None,
                 timeout_s: float = DEFAULT_TIMEOUT_S) -> list[FailedStep]:
    """The failed steps of run ``run_id`` (:func:`failed_steps` of its Argo Workflow, read with ``GET
    /apis/v1beta1/runs/ID``'s ``pipeline_runtime.workflow_manifest``, which KFP's persistence agent keeps
    up to date). Empty when the API keeps no workflow for the run.

    Raises:
        KfpUnreachableError, KfpApiError: the request failed.
    """
    detail = _get_json(normalize_host(host), RUN_V1_PATH.format(run_id=run_id), token, timeout_s)
    if not isinstance(detail, dict):
        raise KfpApiError(f"GET {RUN_V1_PATH.format(run_id=run_id)}: not a run detail: {str(detail)[:200]!r}")
    manifest = (detail.get("pipeline_runtime") or {}).get("workflow_manifest") or ""
    try:
        workflow = json.loads(manifest) if manifest else {}
    except json.JSONDecodeError:
        return []
    return failed_steps(workflow)


def _refusals(host: str, run_id: str, token: str | None) -> tuple[FailedStep, ...]:
    """The steps of a running run whose pods the API server refused (``-- fix:`` in their message); empty when
    none, or when the workflow cannot be read now (the wait goes on)."""
    try:
        failed = run_failures(host, run_id, token)
    except KfpClientError:
        return ()
    return tuple(f for f in failed if " -- fix: " in f.message)


def wait_run(
    host: str | None,
    run_id: str,
    *,
    token: str | None = None,
    timeout_s: float = DEFAULT_WAIT_S,
    poll_s: float = DEFAULT_POLL_S,
    on_state: Callable[[str], None] | None = None,
    refusal_check_s: float = 30.0,
) -> FinishedRun:
    """Wait for run ``run_id`` to reach a final state (``GET /apis/v2beta1/runs/ID`` every ``poll_s`` seconds,
    as :meth:`kfp.Client.wait_for_run_completion` does), then, unless it succeeded, name its failed steps
    (:func:`run_failures`; if that request fails, :attr:`FinishedRun.error` says so and the state stands).

    Args:
        host: the KFP API URL (default: ``$KF_PIPELINES_ENDPOINT``).
        run_id: the run (:attr:`SubmittedRun.run_id`).
        token: bearer token (default: ``$KF_PIPELINES_TOKEN``).
        timeout_s: seconds to wait in all (default 6 hours, as ``--run --wait`` without SECONDS).
        poll_s: seconds between polls.
        on_state: called with each new state (``"PENDING"``, ``"RUNNING"``...) as it is seen.
        refusal_check_s: while the run is not final, its workflow is read at most this often for a step's pod
            that the API server refused (:data:`REFUSALS`): then the wait ends at once with that step, the
            cluster's message and the fix (state ``REFUSED``), instead of waiting out ``timeout_s`` while Argo
            retries a pod a full quota refuses. The run itself goes on (terminate it in the KFP UI).

    Raises:
        TimeoutError: the run was not final after ``timeout_s`` (it goes on; nothing is cancelled).
        KfpUnreachableError, KfpApiError: the requests failed.
    """
    host = normalize_host(host)
    token = token or os.environ.get(TOKEN_ENV) or None
    client = kfp_api_client(host, token)
    deadline = time.monotonic() + timeout_s
    seen = ""
    next_check = time.monotonic()
    while True:
        with api_errors(host, f"reading run {run_id}"):
            run = quiet(client.get_run, run_id)
        state = str(run.state or "")
        if state != seen and on_state is not None:
            on_state(state)
        seen = state
        if state in FINAL_STATES:
            break
        if time.monotonic() >= next_check:
            next_check = time.monotonic() + refusal_check_s
            refused = _refusals(host, run_id, token)
            if refused:
                return FinishedRun(run_id, "REFUSED", refused, f"{state or 'PENDING'}, but the cluster refuses a "
                                   f"step's pod; the run goes on (Argo retries it): terminate it in the KFP UI")
        if time.monotonic() >= deadline:
            raise TimeoutError(f"run {run_id} is still {state or 'not started'} after {timeout_s:g} s; it goes on: "
                               f"follow it in the KFP UI")
        time.sleep(poll_s)
    error = ""
    if run.error is not None and getattr(run.error, "message", None):
        error = str(run.error.message)
    failed: tuple[FailedStep, ...] = ()
    if state != "SUCCEEDED":
        try:
            failed = tuple(run_failures(host, run_id, token))
        except KfpClientError as e:  # the state is known: say it, and why the steps are not
            error = (error + "; " if error else "") + f"its failed steps could not be read ({e})"
    return FinishedRun(run_id, state, failed, error)
