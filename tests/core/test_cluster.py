import json

import pytest

from tfk8s.core.cluster import (
    ClusterConfigError,
    Replica,
    ReplicaCounts,
    ReplicaType,
    cluster_spec,
    coordinator,
    parse_tf_config,
    replica_name,
    tf_config,
    tf_config_json,
)
from tfk8s.core.job import MAX_JOB_NAME_LEN, SUCCESS_POLICY_ALL_WORKERS, TrainingJob, is_success, job_name

W = ReplicaType.WORKER


def _addr(r: Replica) -> str:
    return f"{r.replica_type}-{r.index}.ns.svc:2222"


def test_cluster_spec_lists_each_type_by_index_and_leaves_out_the_evaluator():
    counts = ReplicaCounts(chief=1, worker=2, ps=1, evaluator=1)
    assert cluster_spec(counts, _addr) == {
        "chief": ["chief-0.ns.svc:2222"],
        "worker": ["worker-0.ns.svc:2222", "worker-1.ns.svc:2222"],
        "ps": ["ps-0.ns.svc:2222"],
    }
    assert [r.label for r in counts.replicas()] == ["chief-0", "worker-0", "worker-1", "ps-0", "evaluator-0"]
    assert counts.total == 5 and counts.num_trainers == 3


def test_tf_config_has_the_training_operator_layout():
    spec = cluster_spec(ReplicaCounts(worker=2), _addr)
    cfg = json.loads(tf_config_json(spec, Replica(W, 1)))
    assert cfg == {
        "cluster": {"worker": ["worker-0.ns.svc:2222", "worker-1.ns.svc:2222"]},
        "task": {"type": "worker", "index": 1},
        "environment": "cloud",
    }


def test_evaluator_gets_a_task_but_is_not_in_the_cluster():
    counts = ReplicaCounts(chief=1, worker=1, evaluator=1)
    cfg = tf_config(cluster_spec(counts, _addr), Replica(ReplicaType.EVALUATOR, 0))
    assert cfg["task"] == {"type": "evaluator", "index": 0}
    assert "evaluator" not in cfg["cluster"]


def test_tf_config_rejects_a_replica_outside_the_cluster():
    spec = cluster_spec(ReplicaCounts(worker=2), _addr)
    with pytest.raises(ClusterConfigError, match="worker-2"):
        tf_config(spec, Replica(W, 2))


def test_tf_config_round_trips_through_parse():
    spec = cluster_spec(ReplicaCounts(chief=1, worker=3), _addr)
    parsed_spec, replica = parse_tf_config(tf_config_json(spec, Replica(W, 2)))
    assert parsed_spec == spec and replica == Replica(W, 2)
    assert parse_tf_config("") == ({}, None)
    with pytest.raises(ClusterConfigError, match="not valid"):
        parse_tf_config('{"task": {"type": "boss", "index": 0}}')


def test_chief_is_the_coordinator_else_worker_zero():
    assert coordinator(ReplicaCounts(chief=1, worker=2)) == Replica(ReplicaType.CHIEF, 0)
    assert coordinator(ReplicaCounts(worker=2)) == Replica(W, 0)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"chief": 2}, "chief must be 0 or 1"),
        ({"worker": -1}, "must be an integer >= 0"),
        ({"chief": 0, "worker": 0}, "at least one chief or worker"),
        ({"worker": 2, "ps": 1}, "needs chief=1"),
        ({"evaluator": 2}, "evaluator must be 0 or 1"),
        ({"chief": 1, "worker": 0, "ps": 1}, "needs worker >= 1"),
    ],
)
def test_invalid_replica_counts_name_the_fix(kwargs, message):
    with pytest.raises(ClusterConfigError, match=message):
        ReplicaCounts(**kwargs)


def test_strategy_follows_the_counts():
    assert ReplicaCounts(worker=1).strategy() == "default"
    assert ReplicaCounts(worker=2).strategy() == "multi_worker_mirrored"
    assert ReplicaCounts(chief=1, worker=1).strategy() == "multi_worker_mirrored"
    assert ReplicaCounts(chief=1, worker=2, ps=1).strategy() == "parameter_server"


def test_replica_name_is_job_type_index():
    assert replica_name("tfk8s-run1", Replica(ReplicaType.PS, 3)) == "tfk8s-run1-ps-3"


def test_job_name_is_deterministic_sanitised_and_fits_a_dns_label_with_every_suffix():
    assert job_name("Run_42.a") == "tfk8s-run-42-a"
    assert job_name("Run_42.a") == job_name("Run_42.a")
    long_a, long_b = job_name("x" * 100 + "a"), job_name("x" * 100 + "b")
    assert long_a != long_b and len(long_a) == MAX_JOB_NAME_LEN
    assert len(replica_name(long_a, Replica(ReplicaType.EVALUATOR, 999))) <= 63
    with pytest.raises(ValueError, match="must start with a letter"):
        job_name("r", prefix="1abc")


def test_training_job_rejects_an_invalid_name():
    with pytest.raises(ValueError, match="DNS-1035"):
        TrainingJob(name="Bad_Name", counts=ReplicaCounts(), command=("true",))


def test_success_policies():
    counts = ReplicaCounts(chief=1, worker=2, ps=1)
    chief, w0, w1 = Replica(ReplicaType.CHIEF, 0), Replica(W, 0), Replica(W, 1)
    assert is_success("", counts, {chief})
    assert not is_success("", counts, {w0, w1, Replica(ReplicaType.PS, 0)})
    assert not is_success(SUCCESS_POLICY_ALL_WORKERS, counts, {chief, w0})
    assert is_success(SUCCESS_POLICY_ALL_WORKERS, counts, {chief, w0, w1})
