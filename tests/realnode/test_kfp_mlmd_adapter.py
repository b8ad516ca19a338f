"""hack/kfp/mlmd_server.py, ML Metadata's gRPC service over the PyPI ml-metadata wheel's store, checked without
KFP: the server runs in the environment of hack/kfp/mlmd_venv.sh and MLMD's own Python client
(tests/fakes/programs/mlmd_client_check.py, same environment) puts and gets artifacts, executions, contexts, events and a
lineage subgraph over gRPC. Marked ``kfp`` (make test-kfp); ``TFK8S_TEST_KFP=1 pytest tests/realnode/test_kfp_mlmd_adapter.py``
runs it on a machine without a KFP source tree too (it needs PyPI once, for the wheel)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.kfp
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def mlmd_python() -> str:
    """The Python of the ML Metadata environment (made once by hack/kfp/mlmd_venv.sh)."""
    done = subprocess.run(check=False, args=["bash", str(ROOT / "hack/kfp/mlmd_venv.sh")], capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip().splitlines()[-1]


@pytest.fixture
def mlmd_server(mlmd_python, tmp_path):
    """A running adapter on a free loopback port over a SQLite store in tmp_path; yields (port, process)."""
    proc = subprocess.Popen([mlmd_python, str(ROOT / "hack/kfp/mlmd_server.py"), "--listen", "127.0.0.1:0",
                             "--sqlite", str(tmp_path / "mlmd.sqlite")],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = proc.stdout.readline()
        assert line.startswith("listening on 127.0.0.1:"), (line, proc.stderr.read() if proc.poll() else "")
        yield int(line.split(":")[1].split()[0]), proc, line
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_mlmd_client_round_trips_through_the_adapter(mlmd_python, mlmd_server):
    port, _, line = mlmd_server
    assert "(49 of 52 RPCs served)" in line
    done = subprocess.run(check=False, args=[mlmd_python, str(ROOT / "tests/fakes/programs/mlmd_client_check.py"), str(port)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["artifact"] == {"id": out["artifact"]["id"], "uri": "s3://mlpipeline/v2/artifacts/run-1/train/model",
                               "type": "system.Model", "name": "model", "framework": "tensorflow",
                               "accuracy": 0.975}
    assert out["execution"] == {"name": "train", "state": "COMPLETE", "task_name": "train"}
    assert out["context"]["name"] == "run-1"
    assert out["artifacts_by_context"] == ["s3://mlpipeline/v2/artifacts/run-1/train/model"]
    assert out["executions_by_context"] == ["train"]
    assert out["events"] == [{"artifact_id": out["artifact"]["id"], "type": "OUTPUT", "key": "model"}]
    assert "system.Model" in out["artifact_types"]
    assert out["lineage"] == {"artifacts": 1, "executions": 1, "events": 1}
    # MLMD's own status codes come through gRPC unchanged: an unknown type is NOT_FOUND, a changed type ALREADY_EXISTS
    assert out["missing_ids"] == "no error"
    assert out["error"] == "NotFoundError"
    assert out["type_conflict"] == "AlreadyExistsError"
    assert out["big_bytes"] == 5 * 1024 * 1024  # over gRPC's default 4 MB: the 100 MB limits are set


def test_unserved_rpc_answers_unimplemented_by_name(mlmd_python, mlmd_server):
    port, _, _ = mlmd_server
    code = ("import grpc, sys\n"
            "ch = grpc.insecure_channel(f'127.0.0.1:{sys.argv[1]}')\n"
            "call = ch.unary_unary('/ml_metadata.MetadataStoreService/GetLineageGraph')\n"
            "try:\n    call(b'', timeout=30)\nexcept grpc.RpcError as e:\n    print(e.code().name, e.details())\n")
    done = subprocess.run(check=False, args=[mlmd_python, "-c", code, str(port)], capture_output=True, text=True, timeout=60)
    assert done.stdout.strip() == ("UNIMPLEMENTED ml_metadata.MetadataStoreService/GetLineageGraph is not served: "
                                   "the ml-metadata wheel's store has no GetLineageGraph")


def test_store_keeps_what_was_put_across_a_restart(mlmd_python, tmp_path):
    """The SQLite file is the store: a second server on the same file returns the first one's artifact."""
    db = tmp_path / "mlmd.sqlite"
    put = ("import sys\nfrom ml_metadata import metadata_store\nfrom ml_metadata.proto import metadata_store_pb2 as pb\n"
           "s = metadata_store.MetadataStore(pb.MetadataStoreClientConfig(host='127.0.0.1', port=int(sys.argv[1])))\n"
           "if sys.argv[2] == 'put':\n"
           "    t = s.put_artifact_type(pb.ArtifactType(name='system.Metrics'))\n"
           "    print(s.put_artifacts([pb.Artifact(type_id=t, uri='s3://b/metrics')])[0])\n"
           "else:\n    print([a.uri for a in s.get_artifacts_by_type('system.Metrics')])\n")
    outputs = []
    for what in ("put", "get"):
        proc = subprocess.Popen([mlmd_python, str(ROOT / "hack/kfp/mlmd_server.py"), "--listen", "127.0.0.1:0",
                                 "--sqlite", str(db)], stdout=subprocess.PIPE, text=True)
        try:
            port = int(proc.stdout.readline().split(":")[1].split()[0])
            done = subprocess.run(check=False, args=[mlmd_python, "-c", put, str(port), what], capture_output=True, text=True,
                                  timeout=60)
            assert done.returncode == 0, done.stderr[-2000:]
            outputs.append(done.stdout.strip())
        finally:
            proc.terminate()
            proc.wait(timeout=30)
    assert outputs == ["1", "['s3://b/metrics']"]


def test_bad_store_arguments_are_named(mlmd_python):
    done = subprocess.run(check=False, args=[mlmd_python, str(ROOT / "hack/kfp/mlmd_server.py"), "--mysql", "nohost"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert "--mysql 'nohost': expected HOST:PORT/DATABASE" in done.stderr
    done = subprocess.run(check=False, args=[mlmd_python, str(ROOT / "hack/kfp/mlmd_server.py")], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 2 and "give exactly one store" in done.stderr


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q"]))
