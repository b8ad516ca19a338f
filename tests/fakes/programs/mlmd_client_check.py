"""Talks to an ML Metadata gRPC server with MLMD's own Python client (``ml_metadata.MetadataStore`` over gRPC) and
prints, as one JSON object, what the server stored and returned: types, artifacts, executions, contexts,
attributions/associations, events, a lineage subgraph, an error status, and a 5 MB message (over gRPC's default
4 MB limit). Run with the Python of hack/kfp/mlmd_venv.sh (ml-metadata is not in the project's environment);
tests/realnode/test_kfp_mlmd_adapter.py asserts the values.

    python tests/fakes/programs/mlmd_client_check.py PORT
"""

import json
import sys

from ml_metadata import errors, metadata_store
from ml_metadata.proto import metadata_store_pb2 as pb


def main(port: int) -> dict:
    config = pb.MetadataStoreClientConfig(host="127.0.0.1", port=port)
    config.channel_arguments.max_receive_message_length = 100 * 1024 * 1024  # as KFP's Go client sets it
    store = metadata_store.MetadataStore(config)
    out = {}
    model_type = pb.ArtifactType(name="system.Model")
    model_type.properties["framework"] = pb.STRING
    model_type_id = store.put_artifact_type(model_type)
    exec_type_id = store.put_execution_type(pb.ExecutionType(name="system.ContainerExecution"))
    ctx_type_id = store.put_context_type(pb.ContextType(name="system.PipelineRun"))

    model = pb.Artifact(type_id=model_type_id, uri="s3://mlpipeline/v2/artifacts/run-1/train/model", name="model")
    model.properties["framework"].string_value = "tensorflow"
    model.custom_properties["accuracy"].double_value = 0.975
    [model_id] = store.put_artifacts([model])
    execution = pb.Execution(type_id=exec_type_id, name="train",
                             last_known_state=pb.Execution.COMPLETE)
    execution.custom_properties["task_name"].string_value = "train"
    [exec_id] = store.put_executions([execution])
    [ctx_id] = store.put_contexts([pb.Context(type_id=ctx_type_id, name="run-1")])
    store.put_attributions_and_associations(
        [pb.Attribution(artifact_id=model_id, context_id=ctx_id)],
        [pb.Association(execution_id=exec_id, context_id=ctx_id)])
    event = pb.Event(artifact_id=model_id, execution_id=exec_id, type=pb.Event.OUTPUT)
    event.path.steps.add().key = "model"
    store.put_events([event])

    [got] = store.get_artifacts_by_id([model_id])
    out["artifact"] = {"id": got.id, "uri": got.uri, "type": got.type, "name": got.name,
                       "framework": got.properties["framework"].string_value,
                       "accuracy": got.custom_properties["accuracy"].double_value}
    [got_exec] = store.get_executions_by_id([exec_id])
    out["execution"] = {"name": got_exec.name, "state": pb.Execution.State.Name(got_exec.last_known_state),
                        "task_name": got_exec.custom_properties["task_name"].string_value}
    ctx = store.get_context_by_type_and_name("system.PipelineRun", "run-1")
    out["context"] = {"id": ctx.id, "name": ctx.name}
    out["artifacts_by_context"] = [a.uri for a in store.get_artifacts_by_context(ctx_id)]
    out["executions_by_context"] = [e.name for e in store.get_executions_by_context(ctx_id)]
    events = store.get_events_by_execution_ids([exec_id])
    out["events"] = [{"artifact_id": e.artifact_id, "type": pb.Event.Type.Name(e.type),
                      "key": e.path.steps[0].key} for e in events]
    out["artifact_types"] = sorted(t.name for t in store.get_artifact_types())
    query = pb.LineageSubgraphQueryOptions(
        starting_artifacts=pb.LineageSubgraphQueryOptions.StartingNodes(filter_query=f"id = {model_id}"),
        max_num_hops=2)
    graph = store.get_lineage_subgraph(query)
    out["lineage"] = {"artifacts": len(graph.artifacts), "executions": len(graph.executions),
                      "events": len(graph.events)}
    try:
        store.get_artifacts_by_id([model_id + 1000])
        out["missing_ids"] = "no error"
        store.get_artifact_type("no.such.Type")
    except errors.StatusError as error:
        out["error"] = type(error).__name__
    else:
        out["error"] = None
    try:
        store.put_artifact_type(pb.ArtifactType(name="system.Model"))  # same name, fewer properties: refused
        out["type_conflict"] = None
    except errors.StatusError as error:
        out["type_conflict"] = type(error).__name__
    big = pb.Artifact(type_id=model_type_id, uri="s3://mlpipeline/big")
    big.custom_properties["blob"].string_value = "x" * (5 * 1024 * 1024)
    [big_id] = store.put_artifacts([big])
    [got_big] = store.get_artifacts_by_id([big_id])
    out["big_bytes"] = len(got_big.custom_properties["blob"].string_value)
    return out


if __name__ == "__main__":
    print(json.dumps(main(int(sys.argv[1]))))
