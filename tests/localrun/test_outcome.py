"""The block a local run ends with (tfk8s.localrun.outcome), as a person reads it."""

from __future__ import annotations

from tfk8s.localrun.outcome import print_outcome, why_not_blessed


def _result(metrics: dict) -> dict:
    return {"job": {}, "wall_time_s": 12.0, "metrics": metrics, "accuracy": 0.97, "loss": 0.1, "export_path": "/v/m/1",
            "version": 1, "blessed": False, "summary": "/s", "report": "/r", "run_dir": "/d", "volume": "/v",
            "pipeline_root": "/p"}


def test_the_why_line_is_the_failed_check_in_words_not_one_character_at_a_time(capsys):
    """Issue 34: the Metrics artifact's `reasons` became one string (what KFP's UI shows); the closing block joined
    it as a list: `why : a; c; c; u; r; a; c; y; ...`."""
    failed = "accuracy 0.9712 < min_accuracy 0.9800 (built-in evaluation on the test split)"
    print_outcome(_result({"evaluated": True, "accuracy": 0.97, "reasons": failed,
                           "not_blessed": f"not blessed: {failed}"}))
    (why,) = [line for line in capsys.readouterr().out.splitlines() if line.startswith("  why")]
    assert why == f"  why           : {failed}"


def test_why_not_blessed_takes_a_string_or_a_list_and_leaves_out_the_passed_checks():
    failed = "accuracy 0.5000 < min_accuracy 0.9800 (evaluation)"
    passed = "accuracy drop vs last blessed 0.9900 is -0.4900 ok"
    assert why_not_blessed({"reasons": f"{failed}; {passed}", "not_blessed": f"not blessed: {failed}"}) == failed
    assert why_not_blessed({"reasons": "not blessed: training diverged (loss NaN)"}) == (
        "not blessed: training diverged (loss NaN)")
    assert why_not_blessed({"reasons": [failed, "x"]}) == f"{failed}; x"
    assert why_not_blessed({}) == ""
