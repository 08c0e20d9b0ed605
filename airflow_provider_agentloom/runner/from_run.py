"""Replay a production run offline: its recording, its conf, and where the local run differs from it.

``agentloom replay --from-run`` (``cli.replay``) reads a finished run (:mod:`.production`), then:

1. :func:`build_recording` turns what each model step kept in the task state store into the
   strict recording the mock replays (``llm.kept_run``): every model call is answered with
   production's reply, every model tool call with production's outcome, nothing is paid and no
   tool the model asked for runs. A step that succeeded in production but kept no reply is named
   (:attr:`Recording.not_kept`): the replay does not start then.
2. :func:`replay_conf` gives the local run production's conf (the state it was triggered with).
3. After the local run, :func:`compare` lines production up with it step by step: the status,
   the output, and whether the model was sent the same requests (their fingerprints, kept beside
   the replies): a changed request is answered with production's reply all the same, which a
   replay cannot do better offline, and is shown as such.

Tool *steps* (``type: tool``) run locally, as in any replay of a recording.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from airflow_provider_agentloom.dag.build import dag_id_for
from airflow_provider_agentloom.exceptions import WorkflowValidationError
from airflow_provider_agentloom.llm.fixtures import FIXTURE_VERSION, RECORD_TOOLS_KEY, VERSION_KEY
from airflow_provider_agentloom.llm.kept_run import KeptStep, kept_step
from airflow_provider_agentloom.plan.ids import ENTER_TASK, step_task_ids
from airflow_provider_agentloom.plan.scope import Scope
from airflow_provider_agentloom.runner.production import ProductionRun, ProductionRunError
from airflow_provider_agentloom.workflow.models import AgentStep, LLMCallStep, SubworkflowStep, Workflow
from airflow_provider_agentloom.workflow.parser import graph_of, load_workflow

__all__ = [
    "Recording",
    "StepComparison",
    "StepPlace",
    "build_recording",
    "compare",
    "replay_conf",
    "step_places",
    "workflow_file_of",
]

NOT_KEPT_REASONS = (
    "[state_store] clear_on_success, an entry past [state_store] default_retention_days, "
    "or a run older than this provider's replies in the task state store"
)
"""Why a model step that succeeded can have no kept reply."""


@dataclass(frozen=True)
class StepPlace:
    """A step of the workflow and its task: ``label`` is its id in the run (``sub.child`` below a
    subworkflow), ``step_id`` the id its model requests carry, ``task_id`` the task holding its result."""

    label: str
    step_id: str
    task_id: str
    calls_model: bool


def step_places(workflow: Workflow) -> list[StepPlace]:
    """Every step of ``workflow``, a subworkflow's children just before it, in run order."""
    root = Scope(workflow, graph_of(workflow), dag_id_for(workflow), step_task_ids(workflow))
    return list(_places(root))


def _places(scope: Scope) -> Iterator[StepPlace]:
    for step_id in scope.graph.order:
        step = scope.graph.steps[step_id]
        if isinstance(step, SubworkflowStep):
            yield from _places(scope.child(step))
        yield StepPlace(
            scope.qualified_id(step_id),
            step_id,
            scope.task_id(step_id),
            isinstance(step, LLMCallStep | AgentStep),
        )


@dataclass
class Recording:
    """The recording built from a run (:func:`build_recording`).

    :param data: the recording (``llm.fixtures`` format), to write to a file the mock reads.
    :param kept: what each model step kept, by label.
    :param not_kept: ``(label, why)`` of each model step that succeeded but kept no reply, or whose
        replies the recording cannot hold (its step id is another model step's).
    :param tool_results_missing: by label, tool calls with no kept outcome (replayed as an error).
    """

    data: dict[str, Any] = field(default_factory=dict)
    kept: dict[str, KeptStep] = field(default_factory=dict)
    not_kept: list[tuple[str, str]] = field(default_factory=list)
    tool_results_missing: dict[str, int] = field(default_factory=dict)

    def text(self) -> str:
        return json.dumps(self.data, ensure_ascii=False)

    @property
    def replies(self) -> int:
        return sum(len(step.replies) for step in self.kept.values())


def build_recording(run: ProductionRun, places: list[StepPlace]) -> Recording:
    """The recording of ``run``'s model steps, as ``places`` (the local workflow's) name them."""
    recording = Recording(data={VERSION_KEY: FIXTURE_VERSION, RECORD_TOOLS_KEY: True})
    for place in places:
        task = run.tasks.get(place.task_id)
        if not place.calls_model or task is None:
            continue
        kept = kept_step(task.entries)
        recording.kept[place.label] = kept
        if kept.replies and place.step_id in recording.data:
            recording.not_kept.append(
                (
                    place.label,
                    f"another model step of the run has the id {place.step_id!r} (in a subworkflow): "
                    "a replay tells replies apart by step id only",
                )
            )
        elif kept.replies:
            turns, missing = kept.turns()
            recording.data[place.step_id] = turns
            if missing:
                recording.tool_results_missing[place.label] = missing
        elif task.state == "success":
            dropped = f"; {kept.dropped} entries were unreadable or too big" if kept.dropped else ""
            recording.not_kept.append(
                (place.label, f"production kept no model reply for it ({NOT_KEPT_REASONS}){dropped}")
            )
    return recording


def replay_conf(run: ProductionRun, workflow: Workflow) -> tuple[dict[str, Any], list[str]]:
    """Production's conf for the local run, and the keys left out (not in the local workflow's state)."""
    if workflow.config.airflow.allow_extra_conf:
        return dict(run.conf), []
    kept = {key: value for key, value in run.conf.items() if key in workflow.state}
    return kept, sorted(key for key in run.conf if key not in workflow.state)


def workflow_file_of(run: ProductionRun) -> Path:
    """The workflow file of ``run``'s DAG: the one it was started from, else the YAML file of its
    DAG id in the folder of its DAG file (a ``serve`` or ``load_workflows`` dags folder).

    :raises ProductionRunError: when it is not on this machine (then ``--workflow FILE`` names it).
    """
    hint = "give it with --workflow FILE"
    if run.workflow_file:
        if Path(run.workflow_file).is_file():
            return Path(run.workflow_file)
        raise ProductionRunError(
            f"the workflow file of run {run.run_id!r} is gone: {run.workflow_file}; {hint}"
        )
    if not run.fileloc:
        raise ProductionRunError(f"{run.where} does not say which file DAG {run.dag_id!r} comes from; {hint}")
    fileloc = Path(run.fileloc)
    if fileloc.suffix in (".yaml", ".yml") and fileloc.is_file():
        return fileloc
    folder = fileloc.parent
    if not folder.is_dir():
        raise ProductionRunError(
            f"the DAG file of {run.dag_id!r} ({run.fileloc}) is not on this machine; {hint}"
        )
    for candidate in sorted([*folder.glob("*.yaml"), *folder.glob("*.yml")]):
        try:
            if dag_id_for(load_workflow(candidate)) == run.dag_id:
                return candidate
        except (WorkflowValidationError, OSError):
            continue  # a broken file in the folder is its own DAG's problem
    raise ProductionRunError(f"no workflow file in {folder} builds the DAG {run.dag_id!r}; {hint}")


@dataclass
class StepComparison:
    """One step, production beside the local run.

    :param differences: ``{"status"|"output": {"production", "local"}, "request": {"call", "note"}}``,
        empty when the step is the same.
    """

    step: str
    task_id: str
    production_status: str | None
    local_status: str | None
    differences: dict[str, dict[str, Any]] = field(default_factory=dict)

    @property
    def same(self) -> bool:
        return not self.differences

    def to_json(self) -> dict[str, Any]:
        return {
            "step": self.step,
            "task_id": self.task_id,
            "same": self.same,
            "production_status": self.production_status,
            "local_status": self.local_status,
            "differences": self.differences,
        }


def compare(
    production: ProductionRun, local: ProductionRun, places: list[StepPlace], recording: Recording
) -> list[StepComparison]:
    """Each step of the local workflow, then each task only production had, compared (see the module doc)."""
    found = []
    for place in places:
        before = production.tasks.get(place.task_id)
        after = local.tasks.get(place.task_id)
        row = StepComparison(
            place.label, place.task_id, before.state if before else None, after.state if after else None
        )
        if row.production_status != row.local_status:
            row.differences["status"] = {"production": row.production_status, "local": row.local_status}
        if before is not None and after is not None and _output_differs(before.output, after.output):
            row.differences["output"] = {"production": before.output, "local": after.output}
        request = _request_difference(recording.kept.get(place.label), after.entries if after else {})
        if request is not None:
            row.differences["request"] = request
        found.append(row)
    known = {place.task_id for place in places}
    for task_id, task in production.tasks.items():
        if task_id not in known and _is_step_result(task_id):
            row = StepComparison(task_id, task_id, task.state, None)
            row.differences["status"] = {"production": task.state, "local": None}
            found.append(row)
    return found


def _is_step_result(task_id: str) -> bool:
    """Whether a task holds a step's result (not a subworkflow's opening task)."""
    return not task_id.endswith(f".{ENTER_TASK}")


def _output_differs(production: Any, local: Any) -> bool:
    """Compared as canonical JSON: a mapping's key order is not a difference."""
    return json.dumps(production, sort_keys=True, default=str) != json.dumps(
        local, sort_keys=True, default=str
    )


def _request_difference(kept: KeptStep | None, local_entries: Mapping[str, Any]) -> dict[str, Any] | None:
    """The first model call whose request differs from production's (by fingerprint), or None."""
    if kept is None or not kept.fingerprints:
        return None
    local = kept_step(local_entries).fingerprints
    for number, (was, now) in enumerate(zip(kept.fingerprints, local, strict=False), start=1):
        if was != now:
            return {
                "call": number,
                "note": (
                    f"model call {number} was sent another request than production's (an edited prompt, "
                    "model or setting, or a changed input): it got production's reply all the same"
                ),
            }
    return None
