"""Issue 34: what a new user reads in `python pipelines/train.py --help` and in the cron error, as printed."""

from __future__ import annotations

import re

import pytest

from tfk8s.submit.cron import CronError, validate_cron


def _help(capsys) -> str:
    from pipelines.train import main

    with pytest.raises(SystemExit):
        main(["--help"])
    return re.sub(r"\s+", " ", capsys.readouterr().out)


def test_the_five_field_cron_error_gives_its_fix_once():
    with pytest.raises(CronError) as e:
        validate_cron("0 2 * * *")
    assert str(e.value) == ("cron '0 2 * * *' has 5 fields; KFP cron has 6: seconds minutes hours day-of-month month "
                            "day-of-week; a 5-field Unix cron takes the seconds first: '0 0 2 * * *'")
    assert str(e.value).count("'0 0 2 * * *'") == 1
    with pytest.raises(CronError, match=r"^cron '0 2 \* \*' has 4 fields; KFP cron has 6: seconds .* day-of-week, "
                                        r"e\.g\. '0 0 2 \* \* \*' \(02:00 every day\)$"):
        validate_cron("0 2 * *")


def test_the_help_names_every_compiled_file_and_both_ways_to_give_the_host(capsys):
    text = _help(capsys)
    assert ("--output OUTPUT --compile: where to write (default: ") in text
    assert ("with --format argo: compiled/train.argo.yaml; with --format argo --schedule CRON: "
            "compiled/train.cron.yaml)") in text
    assert "--run compile, then start one run on a KFP cluster (needs --host URL or $KF_PIPELINES_ENDPOINT)" in text
    assert "create a recurring run on a KFP cluster (needs --host URL or $KF_PIPELINES_ENDPOINT)" in text
