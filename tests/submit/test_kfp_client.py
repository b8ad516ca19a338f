"""tfk8s.submit.kfp_client against a real local HTTP server that answers like the KFP v2beta1 API and records what
kfp.Client sends: the method, path, query and JSON body of every request."""

import json
import re
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, urlparse

import pytest
import yaml

from tfk8s.submit import kfp_client
from tfk8s.submit.cron import validate_cron
from tfk8s.submit.errors import CronError, KfpApiError, KfpClientError, KfpUnreachableError, ParameterError
from tfk8s.submit.kfp_client import create_schedule, submit_run
from tfk8s.submit.pipeline_inputs import parse_param_items, resolve_params

REPO = Path(__file__).resolve().parents[2]
PACKAGE = REPO / "compiled" / "train.yaml"


class FakeKfp:
    """A threaded HTTP server on 127.0.0.1 answering the v2beta1 endpoints kfp.Client calls."""

    def __init__(self, experiments=(), pipelines=(), versions=(), status_for=None, recurring=(), run_states=(),
                 workflow=None, runs=()):
        self.requests: list[dict] = []
        self.runs = list(runs)  # [{"run_id", "recurring_run_id", "state", "experiment_id"}], newest first
        self.run_states = list(run_states)  # what GET /apis/v2beta1/runs/run-1 answers, one state per request
        self.workflow = workflow  # the run's Argo Workflow (GET /apis/v1beta1/runs/run-1)
        self.recurring = list(recurring)  # [{"recurring_run_id", "display_name", "experiment_id"}]
        self.created = len(self.recurring)  # recurring runs ever created: new ids are rr-<count>
        self.experiments = list(experiments)  # [{"experiment_id", "display_name"}]
        self.pipelines = list(pipelines)  # [{"pipeline_id", "display_name"}]
        self.versions = list(versions)  # [{"pipeline_id", "pipeline_version_id", "display_name"}]
        self.status_for = status_for or {}  # path -> (status, body) overrides
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):  # keep pytest output clean
                pass

            def _answer(self, method):
                url = urlparse(self.path)
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b""
                ctype = self.headers.get("Content-Type", "")
                body = json.loads(raw) if raw and ctype.startswith("application/json") else raw
                fake.requests.append(
                    {
                        "method": method,
                        "path": url.path,
                        "query": {k: v[0] for k, v in parse_qs(url.query, keep_blank_values=True).items()},
                        "headers": {k.lower(): v for k, v in self.headers.items()},
                        "body": body,
                    }
                )
                status, payload = fake.route(method, url.path, parse_qs(url.query), body)
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self):
                self._answer("GET")

            def do_POST(self):
                self._answer("POST")

            def do_DELETE(self):
                self._answer("DELETE")

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.host = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True)

    def route(self, method, path, query, body):
        if path in self.status_for:
            return self.status_for[path]
        if (method, path) == ("GET", "/apis/v2beta1/healthz"):
            return 200, {"multi_user": False}
        if (method, path) == ("GET", "/apis/v2beta1/experiments"):
            wanted = json.loads(query["filter"][0])["predicates"][0]["stringValue"]
            found = [e for e in self.experiments if e["display_name"] == wanted]
            return 200, ({"experiments": found, "total_size": len(found)} if found else {})
        if (method, path) == ("POST", "/apis/v2beta1/experiments"):
            exp = {"experiment_id": "exp-new", "display_name": body["display_name"]}
            self.experiments.append(exp)
            return 200, exp
        if (method, path) == ("POST", "/apis/v2beta1/runs"):
            return 200, {"run_id": "run-1", "display_name": body["display_name"], "state": "PENDING"}
        if (method, path) == ("GET", "/apis/v2beta1/runs"):
            found = [r for r in self.runs if r["experiment_id"] == query["experiment_id"][0]]
            return 200, ({"runs": found, "total_size": len(found)} if found else {})
        if method == "POST" and path.startswith("/apis/v2beta1/recurringruns/") and path.endswith(":disable"):
            rid = path.rsplit("/", 1)[1].split(":")[0]
            for r in self.recurring:
                if r["recurring_run_id"] == rid:
                    r["status"] = "DISABLED"
            return 200, {}
        if (method, path) == ("GET", "/apis/v2beta1/runs/run-1"):
            state = self.run_states.pop(0) if len(self.run_states) > 1 else self.run_states[0]
            return 200, {"run_id": "run-1", "display_name": "r", "state": state}
        if (method, path) == ("GET", "/apis/v1beta1/runs/run-1"):
            manifest = json.dumps(self.workflow) if self.workflow is not None else ""
            return 200, {"run": {"id": "run-1"}, "pipeline_runtime": {"workflow_manifest": manifest}}
        if (method, path) == ("POST", "/apis/v2beta1/recurringruns"):
            self.created += 1
            run = {
                "recurring_run_id": f"rr-{self.created}",
                "display_name": body["display_name"],
                "experiment_id": body.get("experiment_id"),
                "status": "ENABLED",
            }
            self.recurring.append(run)
            return 200, run
        if (method, path) == ("GET", "/apis/v2beta1/recurringruns"):
            found = [r for r in self.recurring if r["experiment_id"] == query["experiment_id"][0]]
            if "filter" in query:
                wanted = json.loads(query["filter"][0])["predicates"][0]["stringValue"]
                found = [r for r in found if r["display_name"] == wanted]
            return 200, ({"recurringRuns": found, "total_size": len(found)} if found else {})  # the proto's field name
        if method == "DELETE" and path.startswith("/apis/v2beta1/recurringruns/"):
            rid = path.rsplit("/", 1)[1]
            self.recurring = [r for r in self.recurring if r["recurring_run_id"] != rid]
            return 200, {}
        if (method, path) == ("GET", "/apis/v2beta1/pipelines"):
            wanted = json.loads(query["filter"][0])["predicates"][0]["stringValue"]
            found = [p for p in self.pipelines if p["display_name"] == wanted]
            return 200, ({"pipelines": found, "total_size": len(found)} if found else {})
        if (method, path) == ("POST", "/apis/v2beta1/pipelines/upload"):  # KFP names the first version after it
            pipeline = {"pipeline_id": "pipe-1", "display_name": query["name"][0]}
            self.pipelines.append(pipeline)
            self.versions.append(
                {"pipeline_id": "pipe-1", "pipeline_version_id": "ver-1", "display_name": query["name"][0]}
            )
            return 200, pipeline
        if (method, path) == ("POST", "/apis/v2beta1/pipelines"):  # a pipeline without a version
            pipeline = {"pipeline_id": "pipe-1", "display_name": body["display_name"]}
            self.pipelines.append(pipeline)
            return 200, pipeline
        if (method, path) == ("POST", "/apis/v2beta1/pipelines/upload_version"):
            version = {
                "pipeline_id": query["pipelineid"][0],
                "pipeline_version_id": "ver-2",
                "display_name": query["name"][0],
            }
            self.versions.append(version)
            return 200, version
        if method == "GET" and path.startswith("/apis/v2beta1/pipelines/") and path.endswith("/versions"):
            pid = path.split("/")[4]
            found = [v for v in self.versions if v["pipeline_id"] == pid]
            if "filter" in query:
                wanted = json.loads(query["filter"][0])["predicates"][0]["stringValue"]
                found = [v for v in found if v["display_name"] == wanted]
            return 200, ({"pipeline_versions": found[-1:], "total_size": len(found)} if found else {})
        return 404, {"error": f"no route {method} {path}", "code": 5}

    def calls(self):
        return [(r["method"], r["path"]) for r in self.requests]

    def one(self, method, path):
        hits = [r for r in self.requests if (r["method"], r["path"]) == (method, path)]
        assert len(hits) == 1, (method, path, self.calls())
        return hits[0]

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture(autouse=True)
def _isolated_kfp(monkeypatch, tmp_path):
    """No kfp context file, token or endpoint from the developer's machine leaks into a test."""
    from kfp.client import client

    monkeypatch.setattr(client.Client, "_LOCAL_KFP_CONTEXT", str(tmp_path / "kfp-context.json"))
    for var in (
        kfp_client.TOKEN_ENV,
        kfp_client.HOST_ENV,
        "KF_PIPELINES_DEFAULT_EXPERIMENT_NAME",
        "KF_PIPELINES_OVERRIDE_EXPERIMENT_NAME",
    ):
        monkeypatch.delenv(var, raising=False)


def _closed_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def test_run_creates_the_experiment_then_posts_the_spec_and_typed_parameters():
    with FakeKfp() as kfp:
        run = submit_run(
            kfp.host,
            PACKAGE,
            {"epochs": "2", "learning_rate": "0.01", "model_name": "m2"},
            experiment="nightly",
            run_name="try-1",
        )

    assert kfp.calls() == [
        ("GET", "/apis/v2beta1/healthz"),  # our probe
        ("GET", "/apis/v2beta1/healthz"),  # kfp.Client's own
        ("GET", "/apis/v2beta1/experiments"),
        ("POST", "/apis/v2beta1/experiments"),
        ("POST", "/apis/v2beta1/runs"),
    ]
    assert kfp.one("POST", "/apis/v2beta1/experiments")["body"]["display_name"] == "nightly"
    body = kfp.one("POST", "/apis/v2beta1/runs")["body"]
    assert body["experiment_id"] == "exp-new"
    assert body["display_name"] == "try-1"
    assert body["runtime_config"]["parameters"] == {"epochs": 2, "learning_rate": 0.01, "model_name": "m2"}
    compiled = next(yaml.safe_load_all(PACKAGE.read_text()))
    assert body["pipeline_spec"]["pipeline_spec"]["pipelineInfo"]["name"] == "tfk8s-train"
    assert body["pipeline_spec"]["pipeline_spec"]["root"] == compiled["root"]
    assert "pvcMount" in json.dumps(body["pipeline_spec"]["platform_spec"])
    assert "pipeline_version_reference" not in body
    assert run.run_id == "run-1"
    assert run.url == f"{kfp.host}/#/runs/details/run-1"


def test_run_reuses_an_existing_experiment_and_sends_the_token_from_the_environment(monkeypatch):
    monkeypatch.setenv("KF_PIPELINES_TOKEN", "s3cret")
    with FakeKfp(experiments=[{"experiment_id": "exp-7", "display_name": "tfk8s"}]) as kfp:
        run = submit_run(kfp.host, PACKAGE, {})

    assert ("POST", "/apis/v2beta1/experiments") not in kfp.calls()
    assert kfp.one("GET", "/apis/v2beta1/experiments")["query"]["filter"].count('"stringValue": "tfk8s"') == 1
    runs = kfp.one("POST", "/apis/v2beta1/runs")
    assert runs["body"]["experiment_id"] == "exp-7"
    assert runs["body"]["display_name"].startswith("tfk8s-train ")
    assert runs["headers"]["authorization"] == "Bearer s3cret"
    assert kfp.requests[0]["headers"]["authorization"] == "Bearer s3cret"  # the probe too
    assert run.experiment_id == "exp-7"


def test_upload_registers_the_pipeline_then_runs_its_content_named_version():
    import hashlib

    version = "tfk8s-train-" + hashlib.sha256(PACKAGE.read_bytes()).hexdigest()[:12]
    with FakeKfp() as kfp:
        run = submit_run(kfp.host, PACKAGE, {"workers": 3}, upload=True)
        again = submit_run(kfp.host, PACKAGE, {"workers": 3}, upload=True)

    # created without a version (KFP's upload would name its first version after the pipeline, and the next
    # upload of the same package would add a second one: seen on KFP 2.17.0), then one content-named version
    assert kfp.one("POST", "/apis/v2beta1/pipelines")["body"] == {"display_name": "tfk8s-train"}
    assert "/apis/v2beta1/pipelines/upload" not in [r["path"] for r in kfp.requests]
    upload = kfp.one("POST", "/apis/v2beta1/pipelines/upload_version")
    assert upload["query"] == {"name": version, "pipelineid": "pipe-1"}
    assert b'name="uploadfile"' in upload["body"] and b"pipelineInfo" in upload["body"]
    body = next(r for r in kfp.requests if (r["method"], r["path"]) == ("POST", "/apis/v2beta1/runs"))["body"]
    assert body["pipeline_version_reference"] == {"pipeline_id": "pipe-1", "pipeline_version_id": "ver-2"}
    assert "pipeline_spec" not in body
    assert body["runtime_config"]["parameters"] == {"workers": 3}
    assert (run.pipeline_id, run.version_id) == (again.pipeline_id, again.version_id) == ("pipe-1", "ver-2")


def test_upload_adds_a_content_named_version_once_and_reuses_it():
    import hashlib

    version = "tfk8s-train-" + hashlib.sha256(PACKAGE.read_bytes()).hexdigest()[:12]
    with FakeKfp(pipelines=[{"pipeline_id": "pipe-9", "display_name": "tfk8s-train"}]) as kfp:
        first = submit_run(kfp.host, PACKAGE, {}, upload=True)
        second = submit_run(kfp.host, PACKAGE, {}, upload=True)

    uploads = [r for r in kfp.requests if r["path"] == "/apis/v2beta1/pipelines/upload_version"]
    assert len(uploads) == 1
    assert uploads[0]["query"] == {"name": version, "pipelineid": "pipe-9"}
    assert first.version_id == second.version_id == "ver-2"


def test_schedule_posts_a_recurring_run_with_nightly_defaults():
    with FakeKfp() as kfp:
        sched = create_schedule(kfp.host, PACKAGE, "0 0 2 * * *", {"epochs": "5"}, experiment="nightly")

    assert kfp.calls()[-2:] == [("GET", "/apis/v2beta1/recurringruns"), ("POST", "/apis/v2beta1/recurringruns")]
    body = kfp.one("POST", "/apis/v2beta1/recurringruns")["body"]
    assert body["trigger"] == {"cron_schedule": {"cron": "0 0 2 * * *"}}
    assert body["max_concurrency"] == 1
    assert body["no_catchup"] is True
    assert body["mode"] == "ENABLE"
    assert body["experiment_id"] == "exp-new"
    assert body["display_name"] == "tfk8s-train [0 0 2 * * *]"
    assert body["runtime_config"]["parameters"] == {"epochs": 5}
    assert body["pipeline_spec"]["pipeline_spec"]["pipelineInfo"]["name"] == "tfk8s-train"
    assert sched.recurring_run_id == "rr-1" and sched.replaced == ()
    assert sched.url == f"{kfp.host}/#/recurringrun/details/rr-1"


def test_scheduling_again_under_the_same_name_replaces_the_recurring_run_never_adds_a_second():
    """Issue 25 item 6: `--schedule` again (new parameters, same name) replaces the schedule: created, then the
    old one deleted; a schedule of another name, or of the same name in another experiment, is left alone."""
    others = [{"recurring_run_id": "rr-other", "display_name": "weekly", "experiment_id": "exp-1"},
              {"recurring_run_id": "rr-elsewhere", "display_name": "nightly", "experiment_id": "exp-2"}]
    with FakeKfp(experiments=[{"experiment_id": "exp-1", "display_name": "e"}], recurring=others) as kfp:
        first = create_schedule(kfp.host, PACKAGE, "0 0 2 * * *", {"epochs": "5"}, experiment="e", name="nightly")
        second = create_schedule(kfp.host, PACKAGE, "0 0 3 * * *", {"epochs": "7"}, experiment="e", name="nightly")
        names = [(r["recurring_run_id"], r["display_name"], r["experiment_id"]) for r in kfp.recurring]

    assert first.replaced == () and second.replaced == (first.recurring_run_id,)
    assert names == [("rr-other", "weekly", "exp-1"), ("rr-elsewhere", "nightly", "exp-2"),
                     (second.recurring_run_id, "nightly", "exp-1")]
    # the new one was created before the old one was deleted: a refused creation leaves the old schedule
    calls = kfp.calls()
    assert calls.index(("DELETE", f"/apis/v2beta1/recurringruns/{first.recurring_run_id}")) > \
        max(i for i, c in enumerate(calls) if c == ("POST", "/apis/v2beta1/recurringruns"))
    posts = [r["body"] for r in kfp.requests if (r["method"], r["path"]) == ("POST", "/apis/v2beta1/recurringruns")]
    assert [p["runtime_config"]["parameters"] for p in posts] == [{"epochs": 5}, {"epochs": 7}]


def test_a_same_named_schedule_with_a_run_going_is_disabled_not_deleted_and_said(capsys):
    """Deleting a recurring run deletes the Workflow of a run it started (KFP 2.17.0: that run stopped and stayed
    RUNNING in the API): an old schedule with a run going is disabled, kept, and named with its run."""
    from tfk8s.submit.cli import handle

    old = [{"recurring_run_id": "rr-busy", "display_name": "nightly", "experiment_id": "exp-1", "status": "ENABLED"},
           {"recurring_run_id": "rr-idle", "display_name": "nightly", "experiment_id": "exp-1", "status": "ENABLED"}]
    runs = [{"run_id": "run-going", "recurring_run_id": "rr-busy", "state": "RUNNING", "experiment_id": "exp-1"},
            {"run_id": "run-done", "recurring_run_id": "rr-idle", "state": "SUCCEEDED", "experiment_id": "exp-1"},
            {"run_id": "run-other", "recurring_run_id": "rr-elsewhere", "state": "RUNNING", "experiment_id": "exp-1"}]
    with FakeKfp(experiments=[{"experiment_id": "exp-1", "display_name": "tfk8s"}], recurring=old, runs=runs) as kfp:
        s = create_schedule(kfp.host, PACKAGE, "0 0 2 * * *", {}, name="nightly")
        assert (s.replaced, s.disabled) == (("rr-idle",), (("rr-busy", ("run-going",)),))
        assert {r["recurring_run_id"]: r["status"] for r in kfp.recurring} == {"rr-busy": "DISABLED",
                                                                               "rr-3": "ENABLED"}
        assert ("DELETE", "/apis/v2beta1/recurringruns/rr-busy") not in kfp.calls()
        _, args, compile_fn, _ = _cli(["--schedule", "0 0 2 * * *", "--host", kfp.host, "--package", str(PACKAGE),
                                       "--schedule-name", "nightly"])
        assert handle(args, compile_fn) is True
    out = " ".join(capsys.readouterr().out.split())
    assert ("replacing rr-3 of the same name (deleted); rr-busy of the same name disabled, not deleted: its run "
            "run-going is going (deleting a recurring run stops its runs); delete it in the KFP UI once that run "
            "has ended") in out, out


def test_a_refused_new_schedule_leaves_the_old_one():
    old = [{"recurring_run_id": "rr-old", "display_name": "nightly", "experiment_id": "exp-1"}]
    refused = {"/apis/v2beta1/recurringruns": (400, {"error": "bad trigger", "message": "bad trigger", "code": 3})}
    with FakeKfp(experiments=[{"experiment_id": "exp-1", "display_name": "e"}], recurring=old,
                 status_for=refused) as kfp:
        with pytest.raises(KfpApiError, match="bad trigger"):
            create_schedule(kfp.host, PACKAGE, "0 0 2 * * *", experiment="e", name="nightly")
        assert [r["recurring_run_id"] for r in kfp.recurring] == ["rr-old"]
        assert not [c for c in kfp.calls() if c[0] == "DELETE"]


def test_malformed_cron_fails_before_any_request():
    with FakeKfp() as kfp:
        with pytest.raises(
            CronError, match=r"has 5 fields; KFP cron has 6: seconds minutes hours.*'0 0 2 \* \* \*'"
        ):
            create_schedule(kfp.host, PACKAGE, "0 2 * * *")
        with pytest.raises(CronError, match=r"hours 25 is out of range 0-23"):
            create_schedule(kfp.host, PACKAGE, "0 0 25 * * *")
    assert kfp.requests == []


@pytest.mark.parametrize(
    ("cron", "message"),
    [
        ("0 0 2 * * *", None),
        ("0 30 1 * * MON-FRI", None),
        ("*/30 */5 1,13 ? JAN-JUN 1", None),
        ("@daily", None),
        ("@every 6h", None),
        ("0 0 2 * *", "has 5 fields"),
        ("60 0 2 * * *", "seconds 60 is out of range 0-59"),
        ("0 0 2 0 * *", "day-of-month 0 is out of range 1-31"),
        ("0 0 2 * 13 *", "month 13 is out of range 1-12"),
        ("0 0 2 * * 7", "day-of-week 7 is out of range 0-6"),
        ("0 0 x * * *", "hours field has 'x'"),
        ("0 0 */0 * * *", "step in '\\*/0' must be a positive number"),
        ("0 0 5-2 * * *", "range '5-2' runs backwards"),
        ("? 0 2 * * *", "only allowed in day-of-month or day-of-week"),
        ("@nightly", "unknown descriptor"),
    ],
)
def test_cron_validation_names_the_field(cron, message):
    if message is None:
        assert validate_cron(cron) == cron
    else:
        with pytest.raises(CronError, match=message):
            validate_cron(cron)


def test_caching_forced_on_at_submit_is_refused_in_one_line_before_any_request():
    """KFP's enable_caching=True overrides every step's caching-off (kubeflow/pipelines#10676): a cached launch
    would train nothing, so it is refused; None (as compiled) and False go through."""
    with FakeKfp() as kfp:
        for submit in (lambda: submit_run(kfp.host, PACKAGE, enable_caching=True),
                       lambda: create_schedule(kfp.host, PACKAGE, "0 0 2 * * *", enable_caching=True)):
            with pytest.raises(KfpClientError) as err:
                submit()
            message = str(err.value)
            assert "\n" not in message and message.startswith("enable_caching=True would serve every step from KFP's "
                                                              "cache")
            assert ("but ensure-volume, evaluate-model, export-model, launch-training, prepare-dataset, push-model, "
                    "reject-model must run each time") in message and "leave enable_caching unset" in message
        assert kfp.requests == []
        submit_run(kfp.host, PACKAGE, enable_caching=False)
    assert kfp.requests


def test_unknown_parameter_lists_the_known_ones_before_any_request():
    with FakeKfp() as kfp, pytest.raises(ParameterError) as err:
        submit_run(kfp.host, PACKAGE, {"epoch": "2"})
    assert kfp.requests == []
    message = str(err.value)
    assert "unknown pipeline parameter epoch (did you mean epochs?)" in message
    assert "epochs" in message and "workers" in message and "pvc_name" in message


def test_values_are_parsed_to_the_declared_types():
    assert resolve_params(
        PACKAGE,
        {"workers": "3", "learning_rate": "1e-3", "fail_on_unblessed": "true", "model_name": "m", "max_restarts": 1,
         "kubernetes": '{"cpu": "2"}'},
    ) == {"workers": 3, "learning_rate": 0.001, "fail_on_unblessed": True, "model_name": "m", "max_restarts": 1,
          "kubernetes": {"cpu": "2"}}
    # dotted items set keys of an object parameter, their values JSON where they parse
    assert parse_param_items(["kubernetes.cpu=2", 'kubernetes.node_selector={"a": "b"}', "kubernetes.memory=4Gi"]) == {
        "kubernetes": {"cpu": 2, "node_selector": {"a": "b"}, "memory": "4Gi"}}
    with pytest.raises(ParameterError, match="given both whole and"):
        parse_param_items(['kubernetes={"cpu": "1"}', "kubernetes.cpu=2"])
    with pytest.raises(ParameterError, match=r"workers='two': expected an integer"):
        resolve_params(PACKAGE, {"workers": "two"})
    with pytest.raises(ParameterError, match=r"fail_on_unblessed='maybe': expected true or false"):
        resolve_params(PACKAGE, {"fail_on_unblessed": "maybe"})
    with pytest.raises(ParameterError, match=r"workers=True: expected an integer"):
        resolve_params(PACKAGE, {"workers": True})


def test_unreachable_host_is_one_clear_error_within_seconds():
    host = f"http://127.0.0.1:{_closed_port()}"
    t0 = time.monotonic()
    with pytest.raises(KfpUnreachableError) as err:
        submit_run(host, PACKAGE, {"epochs": 1})
    assert time.monotonic() - t0 < 5
    assert str(err.value).startswith(f"cannot reach the KFP API at {host} (connection refused)")
    assert "--host" in str(err.value)


def test_a_server_that_is_not_the_kfp_api_is_named_as_such():
    with (
        FakeKfp(status_for={"/apis/v2beta1/healthz": (404, {})}) as kfp,
        pytest.raises(
            KfpApiError,
            match=r"no KFP v2 API at http://127\.0\.0\.1:\d+ \(GET /apis/v2beta1/healthz -> 404\)",
        ),
    ):
        submit_run(kfp.host, PACKAGE, {})
    assert kfp.calls() == [("GET", "/apis/v2beta1/healthz")]


def test_an_api_error_is_reported_with_status_and_message():
    with (
        FakeKfp(status_for={"/apis/v2beta1/runs": (400, {"message": "bad pipeline spec", "code": 3})}) as kfp,
        pytest.raises(KfpApiError, match=r"answered 400 .*bad pipeline spec"),
    ):
        submit_run(kfp.host, PACKAGE, {})


def test_a_host_without_scheme_is_rejected():
    with pytest.raises(KfpClientError, match=r"needs a scheme and a host name, e\.g\. http://localhost:8080"):
        submit_run("localhost:8080", PACKAGE, {})


# --- the CLI: python pipelines/train.py --run / --schedule (tfk8s/submit/cli.py) ---------------------------


def _cli(argv: list[str]):
    """train.py's parser (as of its main()) with tfk8s.submit.cli's flags; returns (args, compile_fn, compiled)."""
    import argparse
    import shutil

    from tfk8s.submit.cli import add_arguments

    p = argparse.ArgumentParser(prog="python pipelines/train.py")
    mode = p.add_mutually_exclusive_group(required=True)
    mode.add_argument("--compile", action="store_true")
    mode.add_argument("--local", action="store_true")
    p.add_argument("--output", default="compiled/train.yaml")
    p.add_argument("--param", action="append", default=[])
    add_arguments(p, mode)
    compiled: list[Path] = []

    def compile_fn(output):  # stands for pipelines.train.compile_pipeline (same package, no compile time)
        compiled.append(Path(output))
        return Path(shutil.copy(PACKAGE, output))

    return p, p.parse_args(argv) if argv else None, compile_fn, compiled


def test_cli_run_compiles_afresh_and_submits_the_parameters(capsys):
    from tfk8s.submit.cli import handle

    with FakeKfp() as kfp:
        _, args, compile_fn, compiled = _cli(
            [
                "--run",
                "--host",
                kfp.host,
                "--experiment",
                "dev",
                "--param",
                "epochs=2",
                "--param",
                "workers=3",
                "--run-service-account",
                "tfk8s-launcher",
            ]
        )
        assert handle(args, compile_fn) is True

    assert len(compiled) == 1 and compiled[0].name == "train.yaml" and not compiled[0].exists()  # a temp file
    body = kfp.one("POST", "/apis/v2beta1/runs")["body"]
    assert body["runtime_config"]["parameters"] == {"epochs": 2, "workers": 3}
    assert body["service_account"] == "tfk8s-launcher"  # the launch step needs manifests/rbac.yaml's Role
    assert kfp.one("POST", "/apis/v2beta1/experiments")["body"]["display_name"] == "dev"
    assert f"{kfp.host}/#/runs/details/run-1" in capsys.readouterr().out


def test_cli_schedule_creates_the_recurring_run_from_a_given_package(capsys):
    from tfk8s.submit.cli import handle

    with FakeKfp() as kfp:
        _, args, compile_fn, compiled = _cli(
            [
                "--schedule",
                "0 0 2 * * *",
                "--host",
                kfp.host,
                "--package",
                str(PACKAGE),
                "--schedule-name",
                "nightly",
            ]
        )
        assert handle(args, compile_fn) is True

    assert compiled == []  # --package: nothing compiled
    body = kfp.one("POST", "/apis/v2beta1/recurringruns")["body"]
    assert (body["display_name"], body["trigger"]["cron_schedule"]["cron"]) == ("nightly", "0 0 2 * * *")
    assert (body["max_concurrency"], body["no_catchup"], body["mode"]) == (1, True, "ENABLE")
    out = capsys.readouterr().out
    assert "one run at a time, no backfill" in out and "replacing" not in out


def test_cli_schedule_again_says_which_recurring_run_it_replaced(capsys):
    from tfk8s.submit.cli import handle

    old = [{"recurring_run_id": "rr-old", "display_name": "nightly", "experiment_id": "exp-1"}]
    with FakeKfp(experiments=[{"experiment_id": "exp-1", "display_name": "tfk8s"}], recurring=old) as kfp:
        _, args, compile_fn, _ = _cli(["--schedule", "0 0 2 * * *", "--host", kfp.host, "--package", str(PACKAGE),
                                       "--schedule-name", "nightly"])
        assert handle(args, compile_fn) is True
        assert [r["recurring_run_id"] for r in kfp.recurring] == ["rr-2"]
    assert "replacing rr-old of the same name (deleted)" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (
            ["--schedule", "0 2 * * *"],
            r"^error: cron '0 2 \* \* \*' has 5 fields; KFP cron has 6: seconds minutes",
        ),
        (
            ["--run", "--param", "epoch=2"],
            r"^error: unknown pipeline parameter epoch \(did you mean epochs\?\); the compiled pipeline declares: ",
        ),
        (["--run", "--param", "epochs"], r"^error: --param 'epochs': expected key=value"),
        (["--run", "--format", "argo"], r"^error: --format argo applies to --compile only"),
    ],
)
def test_cli_bad_values_are_one_line_errors_before_any_request(argv, message):
    from tfk8s.submit.cli import handle

    with FakeKfp() as kfp:
        _, args, compile_fn, _ = _cli([*argv, "--host", kfp.host])
        with pytest.raises(SystemExit, match=message):
            handle(args, compile_fn)
    assert kfp.requests == []


def test_cli_without_host_or_with_a_dead_one_says_which(monkeypatch):
    from tfk8s.submit.cli import handle

    _, args, compile_fn, compiled = _cli(["--run"])
    with pytest.raises(
        SystemExit, match=r"^error: no KFP host: pass --host URL \(or set KF_PIPELINES_ENDPOINT\)"
    ):
        handle(args, compile_fn)
    assert compiled == []
    dead = f"http://127.0.0.1:{_closed_port()}"
    _, args, compile_fn, _ = _cli(["--run", "--host", dead])
    with pytest.raises(
        SystemExit, match=rf"^error: cannot reach the KFP API at {re.escape(dead)} \(connection refused\)"
    ):
        handle(args, compile_fn)


def test_cli_help_lists_every_flag():
    parser, _, _, _ = _cli([])
    text = " ".join(parser.format_help().split())
    for flag in (
        "--run",
        "--schedule CRON",
        "--format {kfp,argo}",
        "--host URL",
        "--experiment",
        "--run-name",
        "--schedule-name",
        "--upload",
        "--package PATH",
        "--kfp-namespace",
        "--run-service-account NAME",
        "--wait [SECONDS]",
    ):
        assert flag in text, flag
    assert "'0 0 2 * * *' is 02:00 daily" in text
    assert "KF_PIPELINES_TOKEN" in text


def test_an_empty_schedule_is_a_cron_error_not_a_local_run(monkeypatch):
    from pipelines import train

    monkeypatch.setattr(train, "run_local", lambda *a, **k: pytest.fail("--schedule '' ran the pipeline locally"))
    with FakeKfp() as kfp, pytest.raises(SystemExit, match=r"^error: cron '' has 0 fields; KFP cron has 6"):
        train.main(["--schedule", "", "--host", kfp.host])
    assert kfp.requests == []


def _pod(name: str, phase: str, started: str, message: str = "") -> dict:
    return {"name": name, "displayName": name.rsplit(".", 1)[-1], "type": "Pod", "phase": phase,
            "startedAt": started, **({"message": message} if message else {})}


# A failed KFP v2 run's Argo Workflow as KFP 2.17's compiler lays it out (backend/src/v2/compiler/argocompiler):
# per task T a driver pod "T-driver" and the DAG "T" whose one task "executor" is the step's pod.
GATE = "tfk8s.steps.reject_model: error: not blessed: accuracy 0.4123 < min_accuracy 0.999"
FAILED_WORKFLOW = {"status": {"phase": "Failed", "nodes": {
    "n1": {"name": "tfk8s-train-x7k2q", "type": "DAG", "phase": "Failed"},
    "n2": _pod("tfk8s-train-x7k2q.root-driver", "Succeeded", "2026-12-04T21:00:00Z"),
    "n3": _pod("tfk8s-train-x7k2q.root.launch-training-driver", "Succeeded", "2026-12-04T21:01:00Z"),
    "n4": _pod("tfk8s-train-x7k2q.root.launch-training.executor", "Succeeded", "2026-12-04T21:01:10Z"),
    "n5": {"name": "tfk8s-train-x7k2q.root.condition-2", "type": "DAG", "phase": "Failed"},
    "n6": _pod("tfk8s-train-x7k2q.root.condition-2.reject-model.executor", "Failed", "2026-12-04T21:05:00Z",
               f"main: Error (exit code 1): {GATE}"),
    "n7": _pod("tfk8s-train-x7k2q.root.condition-3.push-model-driver", "Error", "2026-12-04T21:04:00Z"),
}}}


def test_failed_steps_names_each_failed_pod_by_its_pipeline_task_oldest_first():
    from tfk8s.submit.kfp_runs import FailedStep, failed_steps

    assert failed_steps(FAILED_WORKFLOW) == [
        FailedStep("push-model (KFP driver)", "Error"),  # no message: its phase
        FailedStep("reject-model", f"main: Error (exit code 1): {GATE}"),
    ]
    assert failed_steps({}) == [] and failed_steps({"status": {"nodes": {"n4": FAILED_WORKFLOW["status"]["nodes"]["n4"]}}}) == []


def test_wait_run_polls_to_a_final_state_and_names_the_failed_step_from_the_runs_workflow():
    from tfk8s.submit.kfp_runs import FailedStep, wait_run

    seen = []
    with FakeKfp(run_states=["PENDING", "RUNNING", "RUNNING", "FAILED"], workflow=FAILED_WORKFLOW) as kfp:
        done = wait_run(kfp.host, "run-1", poll_s=0.01, on_state=seen.append)
    assert seen == ["PENDING", "RUNNING", "FAILED"]  # each new state once
    assert (done.state, done.error) == ("FAILED", "")
    assert done.failed[-1] == FailedStep("reject-model", f"main: Error (exit code 1): {GATE}")
    assert kfp.calls().count(("GET", "/apis/v2beta1/runs/run-1")) == 4
    assert done.describe().splitlines() == ["run run-1 FAILED", "  push-model (KFP driver): Error",
                                            f"  reject-model: main: Error (exit code 1): {GATE}"]


def test_wait_run_for_a_succeeded_run_reads_no_workflow_and_a_late_one_times_out_saying_it_goes_on():
    from tfk8s.submit.kfp_runs import wait_run

    with FakeKfp(run_states=["SUCCEEDED"]) as kfp:
        assert wait_run(kfp.host, "run-1", poll_s=0.01).failed == ()
    assert ("GET", "/apis/v1beta1/runs/run-1") not in kfp.calls()
    with FakeKfp(run_states=["RUNNING"]) as kfp, pytest.raises(TimeoutError, match=r"run run-1 is still RUNNING "
                                                                                    r"after 0.05 s; it goes on"):
        wait_run(kfp.host, "run-1", timeout_s=0.05, poll_s=0.01)


def test_cli_run_wait_prints_the_states_and_exits_with_the_failed_steps_reason(capsys):
    from tfk8s.submit.cli import handle

    with FakeKfp(run_states=["RUNNING", "FAILED"], workflow=FAILED_WORKFLOW) as kfp:
        _, args, compile_fn, _ = _cli(["--run", "--host", kfp.host, "--package", str(PACKAGE), "--wait", "60"])
        with pytest.raises(SystemExit) as failed:
            handle(args, compile_fn)
    assert str(failed.value).splitlines() == ["error: run run-1 FAILED", "  push-model (KFP driver): Error",
                                              f"  reject-model: main: Error (exit code 1): {GATE}"]
    out = capsys.readouterr().out
    assert "tfk8s: run run-1 RUNNING" in out and "tfk8s: run run-1 FAILED" in out
    with FakeKfp(run_states=["SUCCEEDED"]) as kfp:
        _, args, compile_fn, _ = _cli(["--run", "--host", kfp.host, "--package", str(PACKAGE), "--wait"])
        assert args.wait == 6 * 3600 and handle(args, compile_fn) is True


def test_wait_without_run_or_with_no_time_is_a_usage_error(capsys):
    from tfk8s.submit import cli

    p, args, _, _ = _cli(["--schedule", "0 0 2 * * *", "--wait"])
    with pytest.raises(SystemExit):
        cli.check_mode(p, args)
    assert "--wait applies to --run" in capsys.readouterr().err
    for bad in ("0", "-5", "abc", "nan"):
        with pytest.raises(SystemExit):
            _cli(["--run", "--wait", bad])
        assert f"argument --wait: {bad!r} is not a number of seconds > 0 (e.g. 3600" in capsys.readouterr().err


def test_wait_run_keeps_the_final_state_when_the_failed_steps_cannot_be_read():
    from tfk8s.submit.kfp_runs import wait_run

    for status, body in ((302, {}), (200, "<html>login</html>"), (500, {"error": "boom"})):
        with FakeKfp(run_states=["FAILED"], status_for={"/apis/v1beta1/runs/run-1": (status, body)}) as kfp:
            done = wait_run(kfp.host, "run-1", poll_s=0.01)
        assert (done.state, done.failed) == ("FAILED", ())
        assert done.error.startswith("its failed steps could not be read (GET /apis/v1beta1/runs/run-1"), done.error
        assert done.describe().startswith("run run-1 FAILED: its failed steps could not be read")


# The API server's refusals of a step's pod as Argo records them on the node (workflow/controller/operator.go:
# a full quota keeps the node Pending and is retried, any other refusal makes it Error).
QUOTA_FULL = ('pods "tfk8s-train-x7k2q-system-container-impl-2761" is forbidden: exceeded quota: compute-resources, '
              "requested: requests.memory=1Gi, used: requests.memory=3584Mi, limited: requests.memory=4Gi")
MUST_SPECIFY = ('pods "tfk8s-train-x7k2q-system-container-impl-1107" is forbidden: failed quota: compute-resources: '
                "must specify limits.cpu for: main")
POD_SECURITY = ('pods "tfk8s-train-x7k2q-system-container-impl-1107" is forbidden: violates PodSecurity '
                '"restricted:latest": allowPrivilegeEscalation != false')


def test_a_step_pod_refused_by_a_quota_or_admission_is_named_with_the_clusters_message_and_the_fix():
    from tfk8s.submit.kfp_runs import failed_steps

    refused = {"status": {"phase": "Running", "nodes": {
        "n1": _pod("tfk8s-train-x7k2q.root.prepare-dataset.executor", "Pending", "2026-12-04T21:02:00Z", QUOTA_FULL),
        "n2": _pod("tfk8s-train-x7k2q.root.ensure-volume.executor", "Error", "2026-12-04T21:01:00Z", MUST_SPECIFY),
        "n3": _pod("tfk8s-train-x7k2q.root.launch-training-driver", "Error", "2026-12-04T21:03:00Z", POD_SECURITY),
        "n4": _pod("tfk8s-train-x7k2q.root.export-model.executor", "Pending", "2026-12-04T21:04:00Z",
                   "PodInitializing"),  # an ordinary pending pod: not a failure
        "n5": _pod("tfk8s-train-x7k2q.root.evaluate.executor", "Failed", "2026-12-04T21:05:00Z",
                   "main: Error (exit code 1): the data set exceeded quota of the bucket"),  # the step's own error
    }}}
    steps = failed_steps(refused)
    assert [s.task for s in steps] == ["ensure-volume", "prepare-dataset", "launch-training (KFP driver)", "evaluate"]
    ensure, prepare, driver, evaluate = (s.message for s in steps)
    assert ensure.startswith(MUST_SPECIFY + " -- fix: the namespace's ResourceQuota needs the request or limit")
    assert "python pipelines/train.py --run --steps (e.g. '{\"*\": {\"cpu_limit\": \"1\"}}' for limits.cpu)" in ensure
    assert prepare.startswith(f"Pending: {QUOTA_FULL} -- fix: the namespace's ResourceQuota has no room left")
    assert prepare.endswith("""--steps '{"prepare_dataset": {"cpu": "100m", "memory": "512Mi"}}'""")
    assert driver.startswith(POD_SECURITY + " -- fix: the namespace's Pod Security level refuses the step's pod")
    assert evaluate == "main: Error (exit code 1): the data set exceeded quota of the bucket"


def test_wait_run_ends_at_once_on_a_refused_step_while_the_run_is_still_running(capsys):
    from tfk8s.submit.cli import handle
    from tfk8s.submit.kfp_runs import wait_run

    full = {"status": {"phase": "Running", "nodes": {
        "n1": _pod("tfk8s-train-x7k2q.root.prepare-dataset.executor", "Pending", "2026-12-04T21:02:00Z", QUOTA_FULL)}}}
    with FakeKfp(run_states=["RUNNING"], workflow=full) as kfp:
        done = wait_run(kfp.host, "run-1", timeout_s=60, poll_s=0.01, refusal_check_s=0)
    assert done.state == "REFUSED" and [f.task for f in done.failed] == ["prepare-dataset"]
    assert done.describe().splitlines()[0] == ("run run-1 REFUSED: RUNNING, but the cluster refuses a step's pod; "
                                               "the run goes on (Argo retries it): terminate it in the KFP UI")
    with FakeKfp(run_states=["RUNNING"], workflow=full) as kfp:  # --run --wait exits with it
        _, args, compile_fn, _ = _cli(["--run", "--host", kfp.host, "--package", str(PACKAGE), "--wait", "60"])
        with pytest.raises(SystemExit, match=r"(?s)^error: run run-1 REFUSED.*prepare-dataset: Pending: pods "):
            handle(args, compile_fn)
    # a running run whose workflow shows no refusal is waited for as before
    with FakeKfp(run_states=["RUNNING", "RUNNING", "FAILED"], workflow=FAILED_WORKFLOW) as kfp:
        assert wait_run(kfp.host, "run-1", poll_s=0.01, refusal_check_s=0).state == "FAILED"
