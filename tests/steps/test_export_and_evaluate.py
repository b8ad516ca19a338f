import os
import threading

import numpy as np
import pytest

from tfk8s.core.layout import RunLayout
from tfk8s.steps.evaluation import Thresholds, bless, compute_metrics
from tfk8s.steps.model_versions import ExportError, existing_versions, export_saved_model, next_version


def test_metrics_match_a_hand_computed_example():
    labels = np.array([0, 0, 1, 2, 2, 2])
    probs = np.array([
        [0.8, 0.1, 0.1],  # 0 -> 0
        [0.2, 0.7, 0.1],  # 0 -> 1
        [0.1, 0.8, 0.1],  # 1 -> 1
        [0.1, 0.1, 0.8],  # 2 -> 2
        [0.6, 0.2, 0.2],  # 2 -> 0
        [0.0, 0.0, 1.0],  # 2 -> 2
    ])
    r = compute_metrics(labels, probs, ["a", "b", "c"])
    assert r.confusion_matrix == [[1, 1, 0], [0, 1, 0], [1, 0, 2]]
    assert r.accuracy == pytest.approx(4 / 6)
    assert r.precision == pytest.approx([1 / 2, 1 / 2, 1.0])
    assert r.recall == pytest.approx([1 / 2, 1.0, 2 / 3])
    expected_loss = -np.mean(np.log([0.8, 0.2, 0.8, 0.8, 0.2, 1.0]))
    assert r.loss == pytest.approx(expected_loss, rel=1e-6)


def test_metrics_reject_mismatched_shapes_and_out_of_range_labels():
    with pytest.raises(ValueError, match=r"shape \[N=2, C=3\]"):
        compute_metrics(np.array([0, 1]), np.ones((2, 2)) / 2, ["a", "b", "c"])
    with pytest.raises(ValueError, match=r"labels must lie in \[0, 2\)"):
        compute_metrics(np.array([0, 5]), np.ones((2, 2)) / 2, ["a", "b"])


def _result(acc: float):
    n = 1000
    labels = np.zeros(n, dtype=int)
    probs = np.zeros((n, 2))
    k = round(acc * n)
    probs[:k, 0] = 1
    probs[k:, 1] = 1
    return compute_metrics(labels, probs, ["x", "y"])


def test_gate_blesses_above_the_floor_and_within_the_allowed_drop():
    assert bless(_result(0.985), Thresholds(min_accuracy=0.98)).blessed
    refused = bless(_result(0.97), Thresholds(min_accuracy=0.98))
    assert not refused.blessed and "accuracy 0.9700 < min_accuracy 0.9800" in refused.reasons[0]
    regressed = bless(_result(0.981), Thresholds(min_accuracy=0.98, max_accuracy_drop=0.005), 0.99)
    assert not regressed.blessed and "+0.0090 > max_accuracy_drop" in regressed.reasons[1]
    assert bless(_result(0.988), Thresholds(min_accuracy=0.98, max_accuracy_drop=0.005), 0.99).blessed


def test_layout_rejects_ids_that_would_escape_the_volume():
    with pytest.raises(ValueError, match="run id '../x'"):
        RunLayout("/mnt/tfk8s", "../x")
    assert str(RunLayout("/v", "123", "m").export_base) == "/v/models/m"


@pytest.fixture(scope="module")
def saved_model(tmp_path_factory):
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import tensorflow as tf

    class Doubler(tf.Module):
        @tf.function(input_signature=[tf.TensorSpec([None, 3], tf.float32, name="x")])
        def serve(self, x):
            return {"y": 2 * x}

    path = tmp_path_factory.mktemp("m") / "saved_model"
    m = Doubler()
    tf.saved_model.save(m, str(path), signatures={"serving_default": m.serve})
    return path


def test_export_creates_increasing_versions_and_never_overwrites(saved_model, tmp_path):
    base = tmp_path / "models" / "m"
    first = export_saved_model(saved_model, base)
    marker = base / "1" / "MARKER"
    marker.write_text("v1")
    second = export_saved_model(saved_model, base)
    assert (first.version, second.version) == (1, 2)
    assert second.path == str(base / "2")
    assert marker.read_text() == "v1"  # version 1 untouched
    assert existing_versions(base) == [1, 2] and next_version(base) == 3
    assert first.signature["inputs"] == {"x": {"dtype": "float32", "shape": [None, 3]}}
    assert first.signature["outputs"] == {"y": {"dtype": "float32", "shape": [None, 3]}}
    assert sorted(p.name for p in base.iterdir()) == ["1", "2"]  # no staging left behind


def test_concurrent_exports_get_distinct_versions(saved_model, tmp_path):
    base = tmp_path / "m"
    results = []
    threads = [threading.Thread(target=lambda: results.append(export_saved_model(saved_model, base)))
               for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(r.version for r in results) == [1, 2, 3]


def test_export_of_a_non_model_writes_nothing(tmp_path):
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "saved_model.pb").write_bytes(b"not a proto")
    base = tmp_path / "models"
    with pytest.raises(ExportError, match="does not hold a loadable SavedModel"):
        export_saved_model(bad, base)
    assert list(base.iterdir()) == []
    with pytest.raises(ExportError, match="did training finish"):
        export_saved_model(tmp_path / "missing", base)


def test_exporting_a_keras_3_file_names_model_export(tmp_path):
    """Issue 25 item 8: a Keras 3 `model.save(".../model.keras")` left a file the export step called only "no
    SavedModel ... did training finish on the chief?"; now it names the file and model.export(...)."""
    keras = tmp_path / "saved_model"
    keras.mkdir()
    (keras / "model.keras").write_bytes(b"PK")
    with pytest.raises(ExportError) as e:
        export_saved_model(keras, tmp_path / "models")
    assert "it holds the Keras model file(s) ['model.keras']" in str(e.value)
    assert "with Keras 3 export the model with model.export(os.environ['TFK8S_MODEL_DIR'])" in str(e.value)
    assert not (tmp_path / "models").exists() or list((tmp_path / "models").iterdir()) == []


def test_push_keeps_the_version_and_never_overwrites(saved_model, tmp_path):
    from tfk8s.steps.model_versions import latest_version_dir, push_saved_model

    exported = export_saved_model(saved_model, tmp_path / "models" / "m")
    serving = tmp_path / "serving" / "m"
    assert latest_version_dir(serving) is None
    pushed = push_saved_model(exported.path, serving)
    assert (pushed.path, pushed.version) == (str(serving / "1"), 1)
    assert (serving / "1" / "saved_model.pb").is_file()
    assert latest_version_dir(serving) == str(serving / "1")
    with pytest.raises(ExportError, match="never overwritten"):
        push_saved_model(exported.path, serving)
    with pytest.raises(ExportError, match="not a version folder"):
        push_saved_model(saved_model, serving)
    assert sorted(p.name for p in serving.iterdir()) == ["1"]


def test_a_version_already_served_is_never_reused_even_if_exports_were_pruned(saved_model, tmp_path):
    from tfk8s.steps.export_model import export_model_step

    (tmp_path / "serving" / "m" / "4").mkdir(parents=True)  # pushed earlier; models/ pruned since
    result = export_model_step(saved_model_dir=str(saved_model), volume_root=str(tmp_path), model_name="m")
    assert (result.version, result.path) == (5, str(tmp_path / "models" / "m" / "5"))


def test_summary_names_replicas_tf_config_metrics_and_verdict():
    from tfk8s.steps.summary import run_summary_markdown

    result = _result(0.97)
    md = run_summary_markdown(
        training={"job_name": "tfk8s-42", "restarts": 1.0, "cluster_spec": {"worker": ["w0:2222", "w1:2222"]},
                  "train_epochs": 3.0, "train_examples_per_sec": 1234.5},
        export={"path": "/v/models/m/7", "version": 7.0,
                "serving_signature": {"inputs": {"image": {"dtype": "uint8", "shape": [None, 28.0, 28.0, 1.0]}}}},
        result=result, blessing=bless(result, Thresholds(min_accuracy=0.98)),
        baseline={"path": "/v/serving/m/6", "accuracy": 0.99},
    )
    assert "**Verdict: NOT BLESSED** — test accuracy 0.9700 on 1000 examples." in md
    assert "| worker | 2 | `w0:2222`, `w1:2222` |" in md
    assert '"task": {\n    "type": "worker",\n    "index": 0\n  }' in md
    assert "| epochs | 3 |" in md and "| examples per sec | 1234.5000 |" in md
    assert "version **7** at `/v/models/m/7`" in md and '"shape": [null, 28, 28, 1]' in md
    assert "- accuracy 0.9700 < min_accuracy 0.9800" in md
    assert "baseline: last blessed model `/v/serving/m/6`, accuracy 0.9900" in md
    assert md.rstrip().endswith("not pushed: only a blessed model is served")
    assert "| x | 1.0000 | 0.9700 |" in md  # per-class precision/recall under the label names


def test_summary_links_every_replica_log_the_report_and_the_tensorboard_command(tmp_path):
    from tfk8s.steps.summary import run_files, run_summary_markdown

    train = tmp_path / "runs" / "r1" / "train"
    for label in ("worker-0", "worker-1"):
        (train / "replica-logs").mkdir(parents=True, exist_ok=True)
        (train / "replica-logs" / f"{label}.log").write_text("x\n")
    (train / "logs" / "train").mkdir(parents=True)
    files = run_files(train)
    assert list(files)[:2] == ["log of worker-0", "log of worker-1"]
    assert files["log of worker-1"] == str(train / "replica-logs" / "worker-1.log")
    assert files["HTML report"] == str(tmp_path / "runs" / "r1" / "report.html")
    assert files["TensorBoard (pip install 'tfk8s[tensorboard]')"] == f"tensorboard --logdir {train / 'logs'}"
    result = _result(0.99)
    md = run_summary_markdown(training={"job_name": "j"}, export={"path": "/p", "version": 1}, result=result,
                              blessing=bless(result, Thresholds(min_accuracy=0.98)), files=files)
    assert md.rstrip().endswith(f"| TensorBoard (pip install 'tfk8s[tensorboard]') | `tensorboard --logdir "
                                f"{train / 'logs'}` |")
    assert f"| log of worker-0 | `{train / 'replica-logs' / 'worker-0.log'}` |" in md


def test_push_with_the_exports_signature_does_not_load_the_model_again(saved_model, tmp_path, monkeypatch):
    from tfk8s.steps import model_versions as export
    from tfk8s.steps.model_versions import push_saved_model

    exported = export_saved_model(saved_model, tmp_path / "models" / "m")
    loads: list[str] = []
    real = export.serving_signature
    monkeypatch.setattr(export, "serving_signature", lambda d, **kw: loads.append(str(d)) or real(d, **kw))
    pushed = push_saved_model(exported.path, tmp_path / "serving" / "m", signature=exported.signature)
    assert (pushed.version, pushed.signature, loads) == (1, exported.signature, [])
    assert (tmp_path / "serving" / "m" / "1" / "saved_model.pb").is_file()
    # without it (the CLI), or for a folder that holds no SavedModel, the model is loaded and checked
    push_saved_model(exported.path, tmp_path / "serving" / "n")
    assert loads == [exported.path]


def test_the_clis_name_the_model_as_the_pipeline_does_when_no_name_is_given(saved_model, tmp_path, capsys):
    """The Argo export passes `--model-name ''` (the pipeline's default): export names the model after the data
    set recorded in the launch step's training_summary.json (`mnist-cnn`, or `<set>-model` for your program);
    push serves it under the export's own name."""
    import json
    import shutil

    from components import export_model, push_model

    train = tmp_path / "runs" / "r1" / "train"
    shutil.copytree(saved_model, train / "saved_model")
    (train / "training_summary.json").write_text(json.dumps({"dataset": "mnist", "builtin_trainer": True}))
    export_model.main(["--saved-model-dir", str(train / "saved_model"), "--volume-root", str(tmp_path),
                       "--model-name", ""])
    exported = json.loads(capsys.readouterr().out)["path"]
    assert exported == str(tmp_path / "models" / "mnist-cnn" / "1")
    push_model.main(["--model-dir", exported, "--volume-root", str(tmp_path), "--model-name", ""])
    assert json.loads(capsys.readouterr().out)["path"] == str(tmp_path / "serving" / "mnist-cnn" / "1")
    (train / "training_summary.json").write_text(json.dumps({"dataset": "fashion_mnist", "builtin_trainer": False}))
    export_model.main(["--saved-model-dir", str(train / "saved_model"), "--volume-root", str(tmp_path)])
    assert json.loads(capsys.readouterr().out)["path"] == str(tmp_path / "models" / "fashion_mnist-model" / "1")
    (train / "training_summary.json").unlink()
    with pytest.raises(SystemExit):
        export_model.main(["--saved-model-dir", str(train / "saved_model"), "--volume-root", str(tmp_path)])
    assert "no model name given and no training summary" in capsys.readouterr().err


def _signature_model(path, input_spec=None, heads=1):
    """A SavedModel whose ``serving_default`` takes ``input_spec`` and returns ``heads`` outputs of 3 numbers
    (not one probability per MNIST class: the built-in evaluation cannot run it); no signature without a spec."""
    import tensorflow as tf

    class M(tf.Module):
        pass

    m = M()
    if input_spec is None:
        tf.saved_model.save(m, str(path))
        return str(path)

    @tf.function(input_signature=[input_spec])
    def serve(x):
        flat = tf.reshape(tf.cast(x, tf.float32), [tf.shape(x)[0], -1])[:, :3]
        return {f"head{i}": flat * float(i + 1) for i in range(heads)}

    m.serve = serve
    tf.saved_model.save(m, str(path), signatures={"serving_default": serve})
    return str(path)


def _evaluate_on_program_metrics(tmp_path, model_dir, data_dir):
    """The evaluate component's work on a model the built-in evaluation cannot run, whose program reported an
    accuracy of 0.99 (a floor of 0.9): the outcome, the KFP Markdown summary, the metadata and the HTML report."""
    import json

    from tfk8s.steps.evaluate_model import evaluate_model_step

    train = tmp_path / "vol" / "runs" / "r1" / "train"
    train.mkdir(parents=True)
    (train / "training_summary.json").write_text(json.dumps({"job": {"name": "j"}, "metrics": {"accuracy": 0.99}}))
    out = evaluate_model_step(exported={"path": model_dir, "version": 1, "model_name": "m"},
                              dataset={"path": str(data_dir)}, training={"training_summary": str(train / "training_summary.json")},
                              min_accuracy=0.9, max_accuracy_drop=-1.0, gate_metric="accuracy", eval_command="",
                              volume_root=str(tmp_path / "vol"))
    return out, open(out.report).read()


def test_a_model_without_a_serving_signature_is_never_blessed_on_its_programs_metrics(tmp_path, mnist_subset_dir):
    """Issue 25 item 4: a program's own accuracy of 0.99 blessed (and pushed) a model TF Serving cannot serve."""
    out, page = _evaluate_on_program_metrics(tmp_path, _signature_model(tmp_path / "nosig"), mnist_subset_dir)
    why = "not blessed: not servable: the model has no 'serving_default' signature"
    assert out.blessed is False and out.outcome.evaluated is False
    assert out.outcome.blessing.reasons[0].startswith(why) and "model.export(dir)" in out.reasons
    assert "accuracy 0.9900 >= min_accuracy 0.9000 (the training program's metrics)" in out.reasons  # shown, not enough
    assert out.metadata["not_blessed"].startswith(why) and out.metadata["blessed"] is False
    assert f"**{why}" in out.summary and "not pushed: only a blessed model is served" in out.summary
    assert "id='why-not'" in page and why.replace("'", "&#x27;") in page and "NOT BLESSED" in page


def test_a_serving_signature_the_examples_do_not_fit_is_not_blessed_one_they_fit_is(tmp_path, mnist_subset_dir):
    """Issue 25 item 4: the program's metrics bless only an export whose serving_default takes the data set's
    examples (uint8 [None, 28, 28, 1] for MNIST), even when its outputs are not the built-in evaluation's."""
    import tensorflow as tf

    flat = _signature_model(tmp_path / "flat", tf.TensorSpec([None, 784], tf.float32))
    out, page = _evaluate_on_program_metrics(tmp_path / "a", flat, mnist_subset_dir)
    assert out.blessed is False
    assert out.metadata["not_blessed"].startswith(
        "not blessed: not servable: the model's serving signature takes float32 [None, 784]; the data set's images "
        "are uint8 [28, 28, 1]")
    assert "not blessed: not servable: the model&#x27;s serving signature takes float32" in page

    fits = _signature_model(tmp_path / "fits", tf.TensorSpec([None, 28, 28, 1], tf.uint8), heads=2)
    out, page = _evaluate_on_program_metrics(tmp_path / "b", fits, mnist_subset_dir)
    assert out.outcome.evaluated is False and "has 2 outputs" in out.outcome.reason
    assert out.blessed is True and out.metadata["not_blessed"] == ""
    assert out.reasons == "accuracy 0.9900 >= min_accuracy 0.9000 (the training program's metrics)"
    assert "id='why-not'" not in page and "**not blessed" not in out.summary


def test_why_not_blessed_names_the_failed_checks():
    from tfk8s.steps.evaluation import Blessing, gate

    assert gate({"accuracy": 0.5}, Thresholds(min_accuracy=0.9)).why_not == (
        "not blessed: accuracy 0.5000 < min_accuracy 0.9000 (evaluation)")
    assert gate({"accuracy": 0.95}, Thresholds(min_accuracy=0.9)).why_not == ""
    assert Blessing(False, ["not blessed: training diverged (loss NaN)"]).why_not == (
        "not blessed: training diverged (loss NaN)")


def _classification_artifact_bytes(names, matrix, metadata=None) -> int:
    """The size of a ClassificationMetrics artifact's metadata as KFP's launcher sends it to ML Metadata: a
    protobuf Struct (4 MiB gRPC limit before KFP 2.16)."""
    from google.protobuf import json_format, struct_pb2
    from kfp.dsl import ClassificationMetrics

    artifact = ClassificationMetrics(name="classification")
    artifact.log_confusion_matrix(names, matrix)
    artifact.metadata.update(metadata or {})
    return json_format.ParseDict(artifact.metadata, struct_pb2.Struct()).ByteSize()


@pytest.mark.parametrize("classes", [10, 1000])
def test_the_classification_metrics_artifact_stays_far_under_4_mib_whatever_the_class_count(
        tmp_path, monkeypatch, classes):
    """Issue 25 item 10: 1,000 classes made a 10.5 MiB ClassificationMetrics (over ML Metadata's 4 MiB), failing
    the evaluate step after training succeeded. Now at most 50 classes: the most confused, the rest as "other";
    the whole matrix is on the volume, named in the artifact's metadata. Measured: 10 classes 1.8 KiB, 1,000
    classes 29.8 KiB (uncapped: 10.5 MiB)."""
    import json

    from tfk8s.steps import evaluate_model as step
    from tfk8s.steps.evaluation import MAX_CONFUSION_CLASSES, EvaluationOutcome

    rng = np.random.default_rng(0)
    labels = rng.integers(0, classes, 20_000)
    probs = rng.random((labels.size, classes))
    probs[np.arange(labels.size), labels] += 0.02 * classes * (rng.random(labels.size) < 0.7)  # 70 % right
    result = compute_metrics(labels, probs / probs.sum(axis=1, keepdims=True), [f"class-{i:04d}" for i in
                                                                              range(classes)])
    outcome = EvaluationOutcome(True, "built-in classification evaluation",
                                {"accuracy": result.accuracy, "loss": result.loss}, bless(result, Thresholds()),
                                result=result)
    monkeypatch.setattr(step, "evaluate_and_gate", lambda **_kw: outcome)
    train = tmp_path / "vol" / "runs" / "r1" / "train"
    train.mkdir(parents=True)
    out = step.evaluate_model_step(exported={"path": "/v/models/m/1", "version": 1, "model_name": "m"},
                                   dataset={"path": "/d"}, training={"training_summary": str(train / "s.json")},
                                   min_accuracy=0.0, max_accuracy_drop=-1.0, gate_metric="accuracy",
                                   eval_command="", volume_root=str(tmp_path / "vol"))
    names, matrix = out.confusion
    size = _classification_artifact_bytes(names, matrix, out.confusion_metadata)
    full = tmp_path / "vol" / "runs" / "r1" / "evaluation.json"
    assert out.confusion_metadata["full_confusion_matrix"] == str(full)
    saved = json.loads(full.read_text())
    assert saved["confusion_matrix"] == result.confusion_matrix and len(saved["label_names"]) == classes
    assert sum(map(sum, matrix)) == 20_000  # the "other" row and column keep every example
    print(f"ClassificationMetrics of {classes} classes: {size / 1024:.1f} KiB as ML Metadata's Struct")
    if classes == 10:
        assert (names, matrix) == (result.label_names, result.confusion_matrix)
        assert out.confusion_metadata["confusion_classes"] == "all 10 classes" and size < 4 * 1024
    else:
        assert len(names) == len(matrix) == MAX_CONFUSION_CLASSES and names[-1] == "(other 951 classes)"
        assert out.confusion_metadata["confusion_classes"].startswith("the 49 most confused of 1000 classes")
        assert size < 64 * 1024  # far under 4 MiB
        assert _classification_artifact_bytes(result.label_names, result.confusion_matrix) > 4 * 2**20  # before


def test_cap_confusion_keeps_the_most_confused_classes_and_sums_the_rest():
    from tfk8s.steps.evaluation import cap_confusion

    cm = [[5, 0, 0, 0], [0, 5, 3, 0], [0, 1, 5, 0], [2, 0, 0, 5]]  # class 1 and 2 confused most, then 0 and 3
    capped = cap_confusion(["a", "b", "c", "d"], cm, max_classes=3)
    assert capped.label_names == ["b", "c", "(other 2 classes)"]
    assert capped.matrix == [[5, 3, 0], [1, 5, 0], [0, 0, 12]]
    assert (capped.num_classes, capped.shown, capped.capped) == (4, 2, True)
    assert cap_confusion(["a", "b"], [[1, 0], [0, 1]], 2).matrix == [[1, 0], [0, 1]]
    with pytest.raises(ValueError, match="expected \\(3, 3\\)"):
        cap_confusion(["a", "b", "c"], [[1, 0], [0, 1]])


def test_the_metrics_artifacts_metadata_is_what_kfps_ui_table_can_show():
    """KFP's UI lists every custom property of a Metrics artifact in its table; a list showed its protobuf internals
    ({"wrappers_": ...}) and an empty string showed as "" on the real UI (tests/realnode/test_kfp_ui.py)."""
    from tfk8s.steps.evaluate_model import ui_metadata

    metadata = {"blessed": True, "evaluated": True, "how": "built-in classification evaluation",
                "not_evaluated": "", "reasons": ["accuracy 0.99 >= min_accuracy 0.98", "servable"], "left_out": "",
                "not_blessed": ""}
    shown = ui_metadata(metadata)
    assert shown == {"blessed": True, "evaluated": True, "how": "built-in classification evaluation",
                     "reasons": "accuracy 0.99 >= min_accuracy 0.98; servable"}
    assert metadata["reasons"] == ["accuracy 0.99 >= min_accuracy 0.98", "servable"]  # the step's own, unchanged
    assert ui_metadata({"not_blessed": "not blessed: accuracy 0.5 < 0.98", "reasons": []}) == {
        "not_blessed": "not blessed: accuracy 0.5 < 0.98"}


def test_upstream_metadata_unwraps_what_a_real_kfp_wrapped_and_keeps_the_rest():
    """Through KFP 2.17.0 and ML Metadata the evaluate step received the training's nested mappings wrapped as
    {"struct": ...}: its summary named the replica type 'struct' (tests/realnode/test_kfp_ui.py's screenshot);
    KFP's converter.go stores a list field as {"list": [...]} the same way."""
    from tfk8s.steps.cli import upstream_metadata

    wrapped = {"job_name": "tfk8s-1", "replicas": {"struct": {"worker": 2, "ps": 1}},
               "tf_config": {"struct": {"cluster": {"struct": {"worker": ["w-0:2222", "w-1:2222"]}}}},
               "curves": [{"struct": {"epoch": 1}}], "struct": 3, "reasons": {"list": ["a", {"struct": {"b": 1}}]},
               "list": "kept", "labels": {"list": "not a list: kept"}}
    assert upstream_metadata(wrapped) == {
        "job_name": "tfk8s-1", "replicas": {"worker": 2, "ps": 1},
        "tf_config": {"cluster": {"worker": ["w-0:2222", "w-1:2222"]}}, "curves": [{"epoch": 1}], "struct": 3,
        "reasons": ["a", {"b": 1}], "list": "kept", "labels": {"list": "not a list: kept"}}
    plain = {"path": "/mnt/tfk8s/models/mnist/1", "serving_signature": {"inputs": {"x": "uint8"}}}
    assert upstream_metadata(plain) == plain and upstream_metadata(None) == {}


def test_the_argo_exports_evaluate_step_says_nothing_of_a_missing_signature_for_a_servable_model(
        tmp_path, mnist_subset_dir, capsys):
    """Issue 34: `python -m components.evaluate_model` (what compiled/train.argo.yaml runs) wrote "no
    serving_default signature" into the summary of a model that has one, next to "pushed to ..."; the summary
    now describes its signature, and says "no signature" only of a model that has none."""
    import json
    import shutil

    import tensorflow as tf

    from components import evaluate_model

    train = tmp_path / "runs" / "r1" / "train"
    train.mkdir(parents=True)
    (train / "training_summary.json").write_text(json.dumps({"job": {"name": "j"}, "metrics": {"accuracy": 0.99}}))
    fits = _signature_model(tmp_path / "fits", tf.TensorSpec([None, 28, 28, 1], tf.uint8), heads=2)
    shutil.copytree(fits, tmp_path / "models" / "m" / "1")
    args = ["--data-dir", str(mnist_subset_dir), "--saved-model-dir", str(train / "saved_model"),
            "--volume-root", str(tmp_path), "--min-accuracy", "0.9"]
    evaluate_model.main(["--model-dir", str(tmp_path / "models" / "m" / "1"), *args])
    out = json.loads(capsys.readouterr().out)
    assert out["blessed"] is True
    assert f"pushed to `{tmp_path}/serving/m/1`" in out["summary"]
    assert "serving signature `serving_default`: inputs " in out["summary"]
    assert "no `serving_default` signature" not in out["summary"]

    shutil.copytree(_signature_model(tmp_path / "nosig"), tmp_path / "models" / "m" / "2")
    evaluate_model.main(["--model-dir", str(tmp_path / "models" / "m" / "2"), *args])
    out = json.loads(capsys.readouterr().out)
    assert out["blessed"] is False
    assert "no `serving_default` signature (TF Serving needs one to serve this model)" in out["summary"]


def test_the_evaluate_step_on_a_keras_only_folder_names_model_export(tmp_path, capsys):
    """Issue 34: the evaluate step on a folder holding only a `.keras` file said a bare "SavedModel file does not
    exist"; like the launch and export steps it now names the file and `model.export(...)`."""
    from components import evaluate_model

    model = tmp_path / "models" / "m" / "1"
    model.mkdir(parents=True)
    (model / "model.keras").write_bytes(b"PK")
    with pytest.raises(SystemExit):
        evaluate_model.main(["--model-dir", str(model), "--data-dir", str(tmp_path)])
    err = capsys.readouterr().err
    assert "it holds the Keras model file(s) ['model.keras']" in err
    assert "with Keras 3 export the model with model.export(os.environ['TFK8S_MODEL_DIR'])" in err
    assert "SavedModel file does not exist" not in err
