"""What KFP's own UI shows of our run (``make test-kfp``; tests/realnode/kfp_ui.py): the run's graph with every step
done, and the evaluate step's outputs drawn by the UI's viewers: the Metrics table, the confusion matrix with our
label names, the Markdown summary and the HTML report with its pictures loaded. Headless Chromium (Debian's
package) driven by Playwright; the screenshots are written to ``$TFK8S_KFP_SCREENSHOTS`` (docs/kfp.md's come from
there) or the test's own folder."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

pytest.register_assert_rewrite("tests.realnode.kfp_fixtures", "tests.realnode.kfp_ui")

from tests.realnode.kfp_fixtures import KFPBackend
from tests.realnode.kfp_ui import KFPUI, chromium
from tests.realnode.test_kfp import SMALL, start_run, wait_run

pytestmark = [pytest.mark.kfp, pytest.mark.timeout(1800)]  # a run of its own when none is there: minutes
pytest_plugins = ["tests.realnode.e2e_fixtures", "tests.realnode.argo_fixtures", "tests.realnode.kfp_fixtures",
                  "tests.realnode.kfp_ui"]

# The steps of a blessed run, as the graph names its task nodes (the push sits in the condition's sub-DAG).
STEPS = ("ensure-volume", "prepare-dataset", "launch-training", "export-model", "evaluate-model")


def succeeded_run(kfp: KFPBackend) -> str:
    """The id of a run of ours that SUCCEEDED on this backend: the newest one there (test_kfp.py's first test makes
    one), else a new small run."""
    runs = kfp.api("runs?page_size=50&sort_by=created_at%20desc").get("runs", [])
    for r in runs:
        if r.get("state") == "SUCCEEDED":
            return r["run_id"]
    run_id = start_run(kfp, {**SMALL, "min_accuracy": 0.0})
    run = wait_run(kfp, run_id)
    assert run["state"] == "SUCCEEDED", json.dumps(run)[:3000] + "\n" + kfp.diagnostics()
    return run_id


def shots_dir(tmp_path: Path) -> Path:
    d = Path(os.environ.get("TFK8S_KFP_SCREENSHOTS") or tmp_path)
    d.mkdir(parents=True, exist_ok=True)
    return d


def open_artifact(page: Any, name: str, producer: str) -> None:
    """Click the graph's artifact node ``name`` that ``producer`` wrote, then the side panel's Visualization tab.
    Artifact nodes are named by output (two steps may both write ``metrics``): the one whose edge comes from the
    producer's node is the one drawn right after it (the graph's node order follows the pipeline spec)."""
    nodes = page.locator(f'.react-flow__node div[title="{name}"]')
    count = nodes.count()
    assert count >= 1, f"no artifact node {name!r} in the graph"
    # the producer's output node: ids look like 'artifact.<producer>.<name>' in RunDetailsV2's flow elements
    by_id = page.locator(f'.react-flow__node[data-id*="{producer}"] div[title="{name}"]')
    (by_id.first if by_id.count() else nodes.first).click()
    page.get_by_role("button", name="Visualization").click()


def test_the_kfp_ui_draws_our_run_green_and_the_evaluate_steps_outputs(kfp_backend: KFPBackend, kfp_ui: KFPUI,
                                                                       tmp_path: Path):
    exe = chromium()
    if exe is None:
        pytest.skip("chromium is not installed (apt-get install -y chromium)")
    sync_playwright = pytest.importorskip("playwright.sync_api").sync_playwright
    run_id = succeeded_run(kfp_backend)
    shots = shots_dir(tmp_path)
    errors: list[str] = []
    console: list[str] = []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=exe, args=["--no-sandbox", "--disable-gpu"])
        page = browser.new_page(viewport={"width": 1600, "height": 1000})
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.on("console", lambda m: console.append(f"{m.type}: {m.text}"[:500]))
        try:
            look_at_the_run(page, kfp_ui, run_id, shots)
        except Exception as e:  # what the page showed, for the failure's message
            page.screenshot(path=str(shots / "kfp-ui-failure.png"), full_page=True)
            (shots / "kfp-ui-failure.html").write_text(page.content())
            text = page.locator("body").inner_text()[:3000]
            raise AssertionError(
                f"{e}\n--- the page ({page.url}) shows:\n{text}\n--- console:\n" + "\n".join(console[-30:])
                + f"\n--- page errors: {errors}\n--- UI server:\n{kfp_ui.procs['kfp-ui'].tail(30)}"
                + f"\n--- grpcwebproxy:\n{kfp_ui.procs['grpcwebproxy'].tail(15)}\n(screenshot: {shots})") from e
        finally:
            browser.close()
    print(f"\nKFP UI screenshots of run {run_id} in {shots}: {sorted(x.name for x in shots.glob('kfp-ui-*.png'))}")
    assert not errors, errors


def look_at_the_run(page: Any, ui: KFPUI, run_id: str, shots: Path) -> None:
    """The run's page: its graph with every step done, then the evaluate step's outputs, a screenshot of each."""
    page.goto(f"{ui.url}/#/runs/details/{run_id}")
    # every step's node in the graph, each with the UI's "succeeded" icon (MUI CheckCircle)
    for step in STEPS:
        node = page.locator(f'.react-flow__node div[title="{step}"]').first
        node.wait_for(timeout=60_000)
        node.locator('[data-testid="CheckCircleIcon"]').wait_for(timeout=60_000)
    page.screenshot(path=str(shots / "kfp-ui-run-graph.png"))

    open_artifact(page, "classification", "evaluate-model")
    page.get_by_text("Confusion Matrix").first.wait_for(timeout=30_000)
    # our label names on both axes of the heat map (the first ten MNIST classes: '0'..'9')
    cells = page.locator("table").last.locator("td, th").all_inner_texts()
    assert all(str(d) in cells for d in range(10)), cells[:60]
    page.screenshot(path=str(shots / "kfp-ui-confusion-matrix.png"))

    open_artifact(page, "metrics", "evaluate-model")
    page.get_by_text("accuracy").first.wait_for(timeout=30_000)
    page.screenshot(path=str(shots / "kfp-ui-metrics.png"))

    open_artifact(page, "summary", "evaluate-model")
    page.get_by_text("blessed", exact=False).first.wait_for(timeout=30_000)
    page.screenshot(path=str(shots / "kfp-ui-markdown.png"))

    open_artifact(page, "report", "evaluate-model")
    frame_el = page.locator("iframe").last
    frame_el.wait_for(timeout=30_000)
    frame = frame_el.content_frame
    frame.locator("img").first.wait_for(timeout=30_000)
    imgs = frame.locator("img").evaluate_all(
        "els => els.map(e => ({src: e.src.slice(0, 30), w: e.naturalWidth, done: e.complete}))")
    assert imgs and all(i["done"] and i["w"] > 0 for i in imgs), imgs  # every picture drawn (data: URIs)
    page.screenshot(path=str(shots / "kfp-ui-html-report.png"), full_page=True)
