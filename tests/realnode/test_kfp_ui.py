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

# The root DAG's task nodes of a blessed run as the UI's graph draws them (React Flow node ids ``task.<task>``,
# labelled with the components' display names); push-model runs inside condition-branches-1's sub-DAG.
STEPS = ("ensure-volume", "prepare-dataset", "launch-training", "export-model", "evaluate-model",
         "condition-branches-1")


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


def open_artifact(page: Any, producer: str, name: str, heading: str) -> Any:
    """Click the graph's node of artifact ``name`` that task ``producer`` wrote (node id
    ``artifact.<producer>.<name>``: two steps may both write ``metrics``), then the side panel's Visualization
    tab; the viewer's card, found by its heading (``Confusion Matrix: ...``, ``Static HTML``...)."""
    close = page.locator('button:has([data-testid="CloseIcon"])')
    if close.count() and close.first.is_visible():  # the side panel of the artifact before covers the graph
        close.first.click()
    page.get_by_test_id(f"rf__node-artifact.{producer}.{name}").click()
    page.get_by_role("button", name="Visualization").click()
    card = page.get_by_text(heading).first
    card.wait_for(timeout=30_000)
    return card


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
    # every step's node in the graph, each with the UI's "succeeded" icon (MUI's CheckCircle)
    for task in STEPS:
        node = page.get_by_test_id(f"rf__node-task.{task}")
        node.wait_for(timeout=60_000)
        node.get_by_test_id("CheckCircleIcon").wait_for(timeout=60_000)
    page.screenshot(path=str(shots / "kfp-ui-run-graph.png"))

    open_artifact(page, "evaluate-model", "classification", "Confusion Matrix:")
    # our label names on both axes of the heat map (MNIST's classes '0'..'9'), the matrix's 10 x 10 cells
    table = page.locator("table").last
    xlabels = [t.strip() for t in table.locator("th").all_inner_texts() if t.strip()]
    assert xlabels == [str(d) for d in range(10)], xlabels
    page.screenshot(path=str(shots / "kfp-ui-confusion-matrix.png"))

    open_artifact(page, "evaluate-model", "metrics", "Scalar Metrics:")
    metrics = page.locator("table").last.inner_text()
    assert "accuracy" in metrics and "reasons" in metrics, metrics[:2000]
    assert "wrappers_" not in metrics and '""' not in metrics, metrics[:2000]  # every value readable (ui_metadata)
    page.screenshot(path=str(shots / "kfp-ui-metrics.png"))

    open_artifact(page, "evaluate-model", "summary", "Static Markdown")
    page.get_by_text("blessed", exact=False).first.wait_for(timeout=30_000)
    page.screenshot(path=str(shots / "kfp-ui-markdown.png"))

    open_artifact(page, "evaluate-model", "report", "Static HTML")
    frame_el = page.locator("iframe").last
    frame_el.wait_for(timeout=30_000)
    frame = frame_el.content_frame
    frame.locator("img").first.wait_for(timeout=30_000)
    imgs = frame.locator("img").evaluate_all(
        "els => els.map(e => ({src: e.src.slice(0, 30), w: e.naturalWidth, done: e.complete}))")
    assert imgs and all(i["done"] and i["w"] > 0 for i in imgs), imgs  # every picture drawn (data: URIs)
    page.screenshot(path=str(shots / "kfp-ui-html-report.png"), full_page=True)
