"""The Argo CronWorkflow export (``--compile --format argo --schedule CRON``): compiled/train.cron.yaml is what the
code builds now, runs exactly compiled/train.argo.yaml's spec, and schedules like KFP's recurring run (one run at
a time, no catch-up); cron expressions are accepted in the format each side reads, converted or refused."""

import argparse
import json

import pytest
import yaml
from hera.workflows import models as m

import components
from tfk8s.submit.argo import (
    COMMITTED_SCHEDULE,
    CRON_HEADER,
    DEFAULT_CRON_OUTPUT,
    DEFAULT_OUTPUT,
    build_cron_workflow,
)
from tfk8s.submit.cron import argo_schedule
from tfk8s.submit.errors import CronError


@pytest.fixture(scope="module")
def committed() -> dict:
    return yaml.safe_load(DEFAULT_CRON_OUTPUT.read_text())


def test_committed_cron_workflow_is_what_the_code_builds_now(committed):
    from pipelines.train import train_pipeline

    fresh = build_cron_workflow(train_pipeline, components, schedule=COMMITTED_SCHEDULE).to_dict()
    assert fresh == committed, "regenerate: python pipelines/train.py --compile --format argo --schedule '0 2 * * *'"
    assert DEFAULT_CRON_OUTPUT.read_text().startswith(CRON_HEADER)


def test_it_runs_the_exported_workflows_spec_with_kfps_recurring_run_policy(committed):
    workflow = yaml.safe_load(DEFAULT_OUTPUT.read_text())
    assert (committed["apiVersion"], committed["kind"]) == ("argoproj.io/v1alpha1", "CronWorkflow")
    assert committed["metadata"]["name"] == "tfk8s-train"  # runs: tfk8s-train-<unix time>, within 63 chars
    spec = committed["spec"]
    assert spec["workflowSpec"] == workflow["spec"]  # the same steps, parameters and defaults
    assert spec["schedules"] == ["0 2 * * *"]
    assert spec["concurrencyPolicy"] == "Forbid"  # KFP max_concurrency=1
    assert spec["startingDeadlineSeconds"] == 0  # no catch-up of a missed time (KFP no_catchup)
    assert "timezone" not in spec and "suspend" not in spec  # the controller's zone; enabled


def test_cron_yaml_round_trips_through_heras_cron_workflow_model(committed):
    model = m.CronWorkflow.model_validate(committed)
    assert model.model_dump(by_alias=True, exclude_none=True, mode="json") == committed
    typo = json.loads(json.dumps(committed))
    typo["spec"]["concurrency"] = "Forbid"
    assert m.CronWorkflow.model_validate(typo).model_dump(by_alias=True, exclude_none=True, mode="json") != typo


@pytest.mark.parametrize(
    ("cron", "argo"),
    [
        ("0 2 * * *", "0 2 * * *"),  # Argo's own 5 fields: as given
        ("0 0 2 * * *", "0 2 * * *"),  # KFP's 6 with seconds 0: converted
        ("0 30 1 * * MON-FRI", "30 1 * * MON-FRI"),
        ("  */5 * * * *  ", "*/5 * * * *"),
        ("@daily", "@daily"),
        ("@every 6h", "@every 6h"),
    ],
)
def test_argo_schedule_takes_either_format(cron, argo):
    assert argo_schedule(cron) == argo


@pytest.mark.parametrize(
    ("cron", "message"),
    [
        ("30 0 2 * * *", (r"fires at second '30': Argo's cron has 5 fields, minutes hours day-of-month month "
                         r"day-of-week, no seconds; a 6-field KFP cron converts only when its seconds field is 0")),
        ("*/10 * * * * *", r"fires at second '\*/10'"),
        ("0 2 * *", r"has 4 fields; Argo's cron has 5: minutes hours"),
        ("0 25 * * *", r"hours 25 is out of range 0-23; fields are minutes hours day-of-month"),
        ("0 0 25 * * *", r"hours 25 is out of range 0-23; fields are seconds minutes"),  # KFP's, checked as KFP's
        ("? 2 * * *", r"'\?' is only allowed in day-of-month or day-of-week"),
        ("@nightly", "unknown descriptor"),
    ],
)
def test_argo_schedule_refuses_with_one_line_naming_the_difference(cron, message):
    with pytest.raises(CronError, match=message) as err:
        argo_schedule(cron)
    assert "\n" not in str(err.value)


def test_a_time_zone_is_set_when_given_and_checked(tmp_path):
    cw = build_cron_workflow(DEFAULT_OUTPUT.with_name("train.yaml"), components, schedule="0 0 2 * * *",
                             timezone="Europe/Berlin").to_dict()
    assert (cw["spec"]["timezone"], cw["spec"]["schedules"]) == ("Europe/Berlin", ["0 2 * * *"])
    with pytest.raises(CronError, match=r"time zone 'Mars/Base' is not an IANA time zone name"):
        build_cron_workflow(DEFAULT_OUTPUT.with_name("train.yaml"), components, timezone="Mars/Base")


def _parser():
    from pipelines.train import DEFAULT_OUTPUT as KFP_OUTPUT
    from tfk8s.submit.cli import add_arguments

    p = argparse.ArgumentParser(prog="python pipelines/train.py")
    mode = p.add_mutually_exclusive_group(required=True)
    mode.add_argument("--compile", action="store_true")
    mode.add_argument("--local", action="store_true")
    p.add_argument("--output", default=str(KFP_OUTPUT))
    p.add_argument("--param", action="append", default=[])
    add_arguments(p, mode)
    return p


def test_compile_format_argo_schedule_writes_the_cron_workflow(tmp_path, monkeypatch, capsys):
    from pipelines.train import compile_pipeline
    from tfk8s.submit import cli

    p = _parser()
    out = tmp_path / "cron.yaml"
    args = p.parse_args(["--compile", "--format", "argo", "--schedule", "0 0 2 * * *", "--timezone", "UTC",
                         "--output", str(out)])
    cli.check_mode(p, args)
    assert cli.handle(args, compile_pipeline, components)
    written = yaml.safe_load(out.read_text())
    assert written["kind"] == "CronWorkflow"
    assert (written["spec"]["schedules"], written["spec"]["timezone"]) == (["0 2 * * *"], "UTC")
    assert "an Argo CronWorkflow, schedule '0 2 * * *' in UTC, one run at a time" in capsys.readouterr().out

    paths = []
    monkeypatch.setattr("tfk8s.submit.argo.compile_argo", lambda output, **kw: paths.append(output) or output)
    cli.handle(p.parse_args(["--compile", "--format", "argo", "--schedule", "@daily"]), compile_pipeline, components)
    assert paths == [DEFAULT_CRON_OUTPUT]  # neither train.yaml nor train.argo.yaml


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--compile", "--schedule", "0 2 * * *"], ("--compile --schedule exports an Argo CronWorkflow: add "
                                                   "--format argo")),
        (["--local", "--schedule", "0 0 2 * * *"], "--schedule is not allowed with --local"),
        (["--run", "--schedule", "0 0 2 * * *"], "--schedule is not allowed with --run"),
        ([], "one of the arguments --compile --local --run --schedule is required"),
    ],
)
def test_modes_that_do_not_go_together_are_usage_errors(argv, message, capsys):
    from tfk8s.submit import cli

    p = _parser()
    with pytest.raises(SystemExit):
        cli.check_mode(p, p.parse_args(argv))
    assert message in capsys.readouterr().err


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--compile", "--format", "argo", "--schedule", "15 0 2 * * *"], (r"^error: cron '15 0 2 \* \* \*' fires "
                                                                          r"at second '15'")),
        (["--compile", "--format", "argo", "--timezone", "UTC"], r"^error: --timezone applies to a schedule"),
        (["--schedule", "0 0 2 * * *", "--timezone", "UTC", "--host", "http://127.0.0.1:1"],
         r"^error: --timezone applies to the Argo CronWorkflow"),
    ],
)
def test_cli_refuses_before_compiling(argv, message):
    from tfk8s.submit import cli

    compiled = []
    with pytest.raises(SystemExit, match=message):
        cli.handle(_parser().parse_args(argv), lambda out: compiled.append(out), components)
    assert compiled == []
