"""The compiled pipeline (KFP pipeline IR) as data the Argo export can translate: its tasks flattened out of
their ``dsl.If``/``dsl.Else`` sub-DAGs, each with its component's CLI (the ``CLI_IO`` its module declares), its
inputs resolved to Argo expressions, and its conditions as one Argo ``when``.

Reading only: :mod:`tfk8s.submit.argo` builds the Workflow from it. Anything the IR holds that has no
translation raises :class:`ArgoExportError` naming the task and the feature.
"""

from __future__ import annotations

import importlib
import json
import os
import pkgutil
import re
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

# KFP runtime placeholders -> the Argo variable with the same meaning.
_PLACEHOLDERS = {
    "{{$.pipeline_job_uuid}}": "{{workflow.uid}}",
    "{{$.pipeline_job_name}}": "{{workflow.name}}",
    "{{$.pipeline_job_resource_name}}": "{{workflow.name}}",
    "{{$.pipeline_job_create_time_utc}}": "{{workflow.creationTimestamp}}",
}


_CONDITION_REF = re.compile(r"inputs\.parameter_values\['([^']+)'\]")


_CONDITION_TOKEN = re.compile(
    r"\s+|==|!=|<=|>=|<|>|!|&&|\|\||\(|\)|true\b|false\b|-?\d+(?:\.\d+)?|'[^']*'|@\d+@"
)


class ArgoExportError(ValueError):
    """The pipeline uses something the Argo export does not translate; the message names the task and what to
    change (usually: declare it in the component module's ``CLI_IO``, or extend :mod:`tfk8s.submit.argo`)."""


@dataclass(frozen=True)
class PipelineIR:
    """A compiled pipeline: the PipelineSpec (first YAML document) and the kfp-kubernetes executor configs."""

    spec: dict
    kubernetes: dict  # executor label -> KubernetesExecutorConfig as a dict
    components: Any = None  # the package of component modules (their CLIs and CLI_IO), given by the caller

    @property
    def name(self) -> str:
        return self.spec["pipelineInfo"]["name"]

    @property
    def parameters(self) -> dict:
        """The pipeline's input parameters: name -> ``{"parameterType", "defaultValue"?, "isOptional"?}``."""
        return self.spec["root"].get("inputDefinitions", {}).get("parameters", {})

    def executor(self, comp_ref: str) -> dict:
        """The ``deploymentSpec`` executor of component ``comp_ref`` (its container)."""
        return self.spec["deploymentSpec"]["executors"][self.spec["components"][comp_ref]["executorLabel"]]

    def platform(self, comp_ref: str) -> dict:
        """The kfp-kubernetes platform config of the executor of component ``comp_ref`` ({} if none)."""
        return self.kubernetes.get(self.spec["components"][comp_ref].get("executorLabel", ""), {})


@dataclass(frozen=True)
class Value:
    """A value wired into a task, as an Argo expression; ``producer`` is the task whose output it is."""

    expr: str
    ptype: str = "STRING"
    producer: str | None = None


@dataclass
class Step:
    """One container task of the flattened DAG."""

    name: str
    comp_ref: str
    arguments: dict[str, Value]
    dependencies: set[str]
    when: list[str]
    scope: dict[str, Value] = field(default_factory=dict)  # the enclosing DAG's inputs (PVC claim names)


def load_ir(source: Any, components: Any = None) -> PipelineIR:
    """The compiled IR of ``source``.

    Args:
        source: a compiled package path (``.yaml``), its documents as a dict (``{"spec": ..., "platform": ...}``
            or just the PipelineSpec), or a ``@dsl.pipeline`` function (compiled in memory with the KFP compiler).
        components: the package holding the component modules (``import components``), whose ``CLI_IO``
            the export reads. The caller passes both: this module imports neither ``pipelines/`` nor
            ``components/`` (upper layers).

    Raises:
        FileNotFoundError: the package path does not exist.
    """
    if source is None:
        raise ValueError("load_ir needs the pipeline: a compiled package path, its documents, or the "
                         "@dsl.pipeline function (e.g. pipelines.train.train_pipeline)")
    if isinstance(source, (str, os.PathLike)):
        docs = [d for d in yaml.safe_load_all(Path(source).read_text()) if d]
        spec, platform = docs[0], (docs[1] if len(docs) > 1 else {})
    elif isinstance(source, Mapping):
        spec, platform = (source["spec"], source.get("platform") or {}) if "spec" in source else (source, {})
    else:
        from kfp import compiler

        with tempfile.TemporaryDirectory() as tmp:
            package = Path(tmp) / "pipeline.yaml"
            compiler.Compiler().compile(source, str(package))
            return load_ir(package, components)
    executors = (
        platform.get("platforms", {}).get("kubernetes", {}).get("deploymentSpec", {}).get("executors", {})
    )
    return PipelineIR(spec=dict(spec), kubernetes=dict(executors), components=components)


def format_value(value: Any, parameter_type: str) -> str:
    """An IR value as an Argo parameter string: ``128.0`` of a NUMBER_INTEGER -> ``"128"``, booleans ->
    ``"true"``/``"false"``, lists and structs -> JSON, strings unchanged."""
    if parameter_type == "NUMBER_INTEGER":
        return str(int(value))
    if parameter_type == "NUMBER_DOUBLE":
        return repr(float(value))
    if parameter_type == "BOOLEAN":
        return "true" if value else "false"
    if parameter_type in ("LIST", "STRUCT"):
        return json.dumps(value)
    return str(value)


def function_name(ir: PipelineIR, comp_ref: str) -> str:
    """The Python function a component's executor runs (``--function_to_execute``)."""
    executor = ir.executor(comp_ref)
    args = executor.get("container", {}).get("args", [])
    if "--function_to_execute" not in args:
        raise ArgoExportError(
            f"component {comp_ref!r} is not a Python-function container component (importer, resolver, or a "
            f"container component without --function_to_execute): the Argo export runs component CLIs"
        )
    return args[args.index("--function_to_execute") + 1]


def cli_of(ir: PipelineIR, comp_ref: str) -> tuple[list[str], dict]:
    """The command running a component's CLI and its ``CLI_IO`` declaration.

    Raises:
        ArgoExportError: no components package was given, no module of it defines the function, or it declares
            no ``CLI_IO``.
    """
    components = ir.components
    if components is None:
        raise ArgoExportError("no components package given: pass the package of the component modules, e.g. "
                              "build_workflow(source, components) after `import components`")

    fn = function_name(ir, comp_ref)
    names = [fn] + [m.name for m in pkgutil.iter_modules(components.__path__) if m.name != fn]
    for name in names:
        try:
            module = importlib.import_module(f"{components.__name__}.{name}")
        except ModuleNotFoundError:
            continue
        if hasattr(module, fn):
            break
    else:
        raise ArgoExportError(f"no module of components/ defines {fn}(), the function of {comp_ref!r}")
    io = getattr(module, "CLI_IO", None)
    if isinstance(io, Mapping) and fn in io:
        io = io[fn]
    elif name != fn:
        io = None  # a module's plain CLI_IO describes the component the module is named after
    if io is None:
        raise ArgoExportError(
            f"{module.__name__} declares no CLI_IO for {fn}(): add CLI_IO = {{'inputs': {{<artifact>: <flag>}}, "
            f"'outputs': {{<output>: <result field>}}}} (or CLI_IO[{fn!r}] = ... next to other components) so "
            f"the Argo export can run and wire it"
        )
    return list(io.get("command") or ["python", "-m", module.__name__]), dict(io)


_INPUT_REF = re.compile(r"\{\{\$\.inputs\.parameters\['([^']+)'\]\}\}")


def resolve_input_refs(task: str, value: str, inputs: Mapping[str, Value]) -> str:
    """``value`` with each ``{{$.inputs.parameters['name']}}`` (a task's own input, as KFP writes a
    ``set_container_image(pipeline_parameter)``) replaced by that input's Argo expression.

    Raises:
        ArgoExportError: the task has no input of that name.
    """

    def sub(match: re.Match) -> str:
        if match.group(1) not in inputs:
            raise ArgoExportError(f"task {task!r}: {match.group(0)} names no input of the task")
        return inputs[match.group(1)].expr

    return _INPUT_REF.sub(sub, value)


def _constant(task: str, value: Any, ptype: str, inputs: Mapping[str, Value] | None = None) -> str:
    if not isinstance(value, str):
        return format_value(value, ptype)
    value = resolve_input_refs(task, value, inputs or {})
    for kfp_placeholder, argo_variable in _PLACEHOLDERS.items():
        value = value.replace(kfp_placeholder, argo_variable)
    value = value.replace("{{$.pipeline_task_name}}", task)
    if "{{$" in value:
        raise ArgoExportError(
            f"task {task!r}: KFP placeholder in {value!r} has no Argo counterpart here "
            f"(translated: {', '.join(_PLACEHOLDERS)}, {{{{$.pipeline_task_name}}}})"
        )
    return value


def _condition(task: str, condition: str, inputs: dict[str, Value]) -> str:
    """A KFP trigger condition (CEL over ``inputs.parameter_values['...']``) as an Argo ``when`` expression."""
    refs: list[str] = []

    def ref(match: re.Match) -> str:
        refs.append(match.group(1))
        return f"@{len(refs) - 1}@"

    text = _CONDITION_REF.sub(ref, condition.replace('"', "'"))
    if _CONDITION_TOKEN.sub("", text):
        raise ArgoExportError(
            f"task {task!r}: condition {condition!r} uses more than comparisons, !, && and || of parameters and "
            f"literals, which the Argo export translates"
        )
    for i, name in enumerate(refs):
        value = inputs[name]
        expr = (
            value.expr if value.ptype in ("BOOLEAN", "NUMBER_INTEGER", "NUMBER_DOUBLE") else f"'{value.expr}'"
        )
        text = text.replace(f"@{i}@", expr)
    return text


def _resolve_inputs(
    ir: PipelineIR, task_name: str, task: dict, scope: dict, outputs: dict
) -> dict[str, Value]:
    """A task's inputs as values of the enclosing scope: ``scope`` holds the enclosing DAG's inputs,
    ``outputs[(task, key)]`` the outputs of container tasks already flattened."""
    comp = ir.spec["components"][task["componentRef"]["name"]]
    declared = comp.get("inputDefinitions", {}).get("parameters", {})
    resolved: dict[str, Value] = {}
    constants: dict[str, tuple[Any, str]] = {}
    for kind in ("parameters", "artifacts"):
        for name, src in task.get("inputs", {}).get(kind, {}).items():
            ptype = declared.get(name, {}).get("parameterType", "STRING")
            outer = src.get("componentInputParameter") or src.get("componentInputArtifact")
            produced = src.get("taskOutputParameter") or src.get("taskOutputArtifact")
            if outer is not None:
                value = scope[outer]
                resolved[name] = Value(
                    value.expr, ptype if kind == "parameters" else value.ptype, value.producer
                )
            elif produced is not None:
                producer = produced["producerTask"]
                key = produced.get("outputParameterKey") or produced.get("outputArtifactKey")
                if (producer, key) not in outputs:
                    raise ArgoExportError(
                        f"task {task_name!r} consumes {producer}.{key}: either {producer!r} is a sub-DAG (its "
                        f"outputs are not translated) or its component's CLI_IO['outputs'] does not map {key!r} "
                        f"to a field of its CLI result"
                    )
                resolved[name] = Value(outputs[(producer, key)], ptype, producer)
            elif "runtimeValue" in src:
                constants[name] = (src["runtimeValue"]["constant"], ptype)
            else:
                raise ArgoExportError(f"task {task_name!r}: input {name!r} comes from {src}, not translated")
    # constants last: one may name another input (KFP's base_image = {{$.inputs.parameters['pipelinechannel--image']}})
    for name, (constant, ptype) in constants.items():
        resolved[name] = Value(_constant(task_name, constant, ptype, resolved), ptype)
    order = [n for kind in ("parameters", "artifacts") for n in task.get("inputs", {}).get(kind, {})]
    return {n: resolved[n] for n in order}


def topological(tasks: dict) -> list[str]:
    """The task names of one DAG of the IR (name -> task spec), each after the tasks it depends on.

    Raises:
        ArgoExportError: a dependency cycle (or a dependency on a task outside the DAG).
    """
    order: list[str] = []
    pending = dict(tasks)
    while pending:
        ready = [n for n, t in pending.items() if set(t.get("dependentTasks", [])) <= set(order)]
        if not ready:
            raise ArgoExportError(f"tasks {sorted(pending)} depend on each other in a cycle")
        order += ready
        for n in ready:
            del pending[n]
    return order


def flatten(
    ir: PipelineIR,
    tasks: dict,
    scope: dict,
    after: set[str],
    when: list[str],
    steps: list[Step],
    outputs: dict,
) -> set[str]:
    """Append the container tasks of ``tasks`` (a DAG, sub-DAGs flattened) to ``steps``; returns their names."""
    leaves: dict[str, set[str]] = {}
    for task_name in topological(tasks):
        task = tasks[task_name]
        comp_ref = task["componentRef"]["name"]
        comp = ir.spec["components"][comp_ref]
        unsupported = {"iteratorPolicy", "parameterIterator", "artifactIterator"} & set(task)
        if unsupported:
            raise ArgoExportError(
                f"task {task_name!r} is a loop ({sorted(unsupported)}), not translated to Argo"
            )
        inputs = _resolve_inputs(ir, task_name, task, scope, outputs)
        deps = set(after).union(*(leaves[d] for d in task.get("dependentTasks", [])))
        deps |= {v.producer for v in inputs.values() if v.producer}
        strategy = task.get("triggerPolicy", {}).get("strategy", "ALL_UPSTREAM_TASKS_SUCCEEDED")
        if strategy != "ALL_UPSTREAM_TASKS_SUCCEEDED":
            raise ArgoExportError(
                f"task {task_name!r} has trigger strategy {strategy} (dsl.ExitHandler), not translated to Argo"
            )
        conditions = list(when)
        if task.get("triggerPolicy", {}).get("condition"):
            conditions.append(_condition(task_name, task["triggerPolicy"]["condition"], inputs))
        if "dag" in comp:
            leaves[task_name] = flatten(ir, comp["dag"]["tasks"], inputs, deps, conditions, steps, outputs)
            continue
        if any(s.name == task_name for s in steps):
            raise ArgoExportError(f"two tasks are named {task_name!r}: Argo needs unique task names")
        _, io = cli_of(ir, comp_ref)
        declared_outputs = comp.get("outputDefinitions", {})
        for key in [*declared_outputs.get("parameters", {}), *declared_outputs.get("artifacts", {})]:
            if key in io.get("outputs", {}):
                outputs[(task_name, key)] = f"{{{{tasks.{task_name}.outputs.parameters.{key}}}}}"
        steps.append(Step(task_name, comp_ref, inputs, deps, conditions, scope))
        leaves[task_name] = {task_name}
    return set().union(*leaves.values()) if leaves else set()
