"""One workflow file → its DAG, or the one error that stands for it; the loader and ``validate`` share it.

Nothing raised while reading, parsing or building one file escapes. A
:class:`~airflow_provider_agentloom.exceptions.WorkflowValidationError` comes back as it is (file,
line, key); any other ``Exception`` (something Airflow refused that no check foresaw, a
``RecursionError``, a ``MemoryError``) becomes one naming the file and the exception, logged
with its traceback. ``BaseException``\\s pass: Ctrl-C, ``SystemExit``, and Airflow's own import
timeout (``AirflowTaskTimeout``), which must still stop the DagBag. Because the loader and
``validate`` go through the same functions, a file that validates is a file that loads.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable
from dataclasses import dataclass

from airflow.sdk import DAG

from airflow_provider_agentloom import settings
from airflow_provider_agentloom.dag.build import build_dag
from airflow_provider_agentloom.exceptions import WorkflowValidationError
from airflow_provider_agentloom.tools.base import BaseTool
from airflow_provider_agentloom.workflow.limits import (
    ParseLimits,
    read_workflow_text,
)
from airflow_provider_agentloom.workflow.models import Workflow
from airflow_provider_agentloom.workflow.parser import looks_like_a_workflow, parse_workflow_text

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class BuiltWorkflow:
    """A workflow file that loads: the workflow and the DAG built from it."""

    workflow: Workflow
    dag: DAG


def contained(source: str, exc: Exception, activity: str) -> WorkflowValidationError:
    """Turn an unexpected exception into the file's error (logged with its traceback)."""
    log.warning("Unexpected error while %s %s", activity, source, exc_info=exc)
    detail = str(exc).strip().splitlines()[0][:500] if str(exc).strip() else ""
    return WorkflowValidationError.from_message(
        source, f"could not {activity}: {type(exc).__name__}{': ' + detail if detail else ''}"
    )


def _with_detail(exc: WorkflowValidationError, source: str) -> WorkflowValidationError:
    if exc.issues:
        return exc
    return WorkflowValidationError.from_message(source, "refused without a detail (please report this)")


def read_workflow(path: str | os.PathLike[str], limits: ParseLimits) -> Workflow | WorkflowValidationError:
    """Read and validate one workflow file within ``limits``; never raises an ``Exception``."""
    source = os.fspath(path)
    try:
        text = read_workflow_text(source, limits)
        if not looks_like_a_workflow(text):
            return WorkflowValidationError.from_message(
                source, "not a workflow: no top-level 'name:' or 'steps:' key"
            )
        return parse_workflow_text(text, source, limits=limits)
    except WorkflowValidationError as exc:
        return _with_detail(exc, source)
    except Exception as exc:
        return contained(source, exc, "read the workflow file")


def build_workflow_dag(
    workflow: Workflow, *, tools: Iterable[BaseTool] = (), working_dir: str | None = None
) -> DAG | WorkflowValidationError:
    """Build the DAG of a loaded workflow and validate it as the DagBag will; never raises ``Exception``."""
    source = workflow.source_path or "<string>"
    try:
        dag = build_dag(workflow, tools=tools, working_dir=working_dir)
        dag.validate()  # type: ignore[no-untyped-call]  # what the DagBag runs before it keeps a DAG
    except WorkflowValidationError as exc:
        return _with_detail(exc, source)
    except Exception as exc:
        return contained(source, exc, "build the DAG of")
    return dag


def load_and_build(
    path: str | os.PathLike[str],
    *,
    limits: ParseLimits | None = None,
    tools: Iterable[BaseTool] = (),
    working_dir: str | None = None,
) -> BuiltWorkflow | WorkflowValidationError:
    """Read, validate and build one workflow file, as the loader does: its DAG, or its error.

    :param path: the workflow file.
    :param limits: the parse limits (default: the ``[agentloom]`` options, read now).
    :param tools: custom tools (they do not change the verdict).
    :param working_dir: the tools' working directory (see ``WorkflowRunContext``).
    """
    workflow = read_workflow(path, limits or settings.workflow_limits())
    if isinstance(workflow, WorkflowValidationError):
        return workflow
    dag = build_workflow_dag(workflow, tools=tools, working_dir=working_dir)
    if isinstance(dag, WorkflowValidationError):
        return dag
    return BuiltWorkflow(workflow, dag)
