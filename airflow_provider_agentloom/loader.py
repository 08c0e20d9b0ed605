"""The dags-folder loader: every workflow YAML next to a one-line ``.py`` becomes a DAG.

Put this in a ``.py`` file in your dags folder (Airflow only reads ``.py`` files)::

    from airflow_provider_agentloom.loader import load_workflows  # airflow dag loader

    load_workflows(globals())

- A broken file never hides the others: it becomes a placeholder DAG tagged ``invalid`` whose
  docs and only task show the error (file, line, key), and, as a best effort, an import error
  under the YAML file's own path (see :func:`_report_broken`); the other workflows still load.
- Two files whose workflows get the same DAG id: the second is reported, naming both files.
- A worker that re-imports the loader to run one task parses and builds only that DAG: it finds
  the file by reading each file's ``name:`` line, without parsing the others.
- Parsed workflows are cached per process by path, modification time and size.
"""

from __future__ import annotations

import logging
import os
import re
import sys
from collections.abc import Iterable, MutableMapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from airflow.sdk import DAG

from airflow_provider_agentloom.exceptions import WorkflowValidationError
from airflow_provider_agentloom.tools.base import BaseTool
from airflow_provider_agentloom.workflow.models import SubworkflowStep, Workflow
from airflow_provider_agentloom.workflow.parser import load_workflow

log = logging.getLogger(__name__)

DEFAULT_PATTERNS = ("*.yaml", "*.yml")
GLOBAL_PREFIX = "agentloom_dag__"
INVALID_TAG = "invalid"

_NAME_LINE = re.compile(r"^name:[ \t]*(.+?)[ \t]*$", re.MULTILINE)
_DAG_ID_LINE = re.compile(r"^[ \t]+dag_id:[ \t]*(.+?)[ \t]*$", re.MULTILINE)
_WORKFLOW_KEYS = re.compile(r"^(?:name|steps)[ \t]*:", re.MULTILINE)


@dataclass
class _Entry:
    stamp: tuple[tuple[str, int, int], ...]
    result: Workflow | WorkflowValidationError


_CACHE: dict[str, _Entry] = {}


def load_workflows(
    globals_dict: MutableMapping[str, Any] | None = None,
    folder: str | os.PathLike[str] | None = None,
    *,
    tools: Iterable[BaseTool] = (),
    patterns: Iterable[str] = DEFAULT_PATTERNS,
    recursive: bool = True,
    working_dir: str | None = None,
) -> dict[str, DAG]:
    """Build a DAG from every workflow file in ``folder`` and put them in ``globals_dict``.

    :param globals_dict: the calling module's ``globals()``; Airflow collects DAGs from there.
    :param folder: where the workflow files are; defaults to the folder of the calling file.
    :param tools: custom tools (``@tool`` functions or ``BaseTool`` instances) the workflows use.
    :param patterns: file name patterns of workflow files.
    :param recursive: also look in sub-folders.
    :param working_dir: the directory built-in tools run from (``{dag_id}``/``{run_id}`` filled in).
    :return: the DAGs built, by DAG id.
    """
    from airflow_provider_agentloom.dag_factory import build_dag, dag_id_for

    globals_dict = globals_dict if globals_dict is not None else {}
    root = Path(folder) if folder is not None else _caller_folder(globals_dict)
    files = _workflow_files(root, tuple(patterns), recursive)
    wanted = _parsing_context_dag_id()
    if wanted is not None:
        files = _files_for_dag(files, wanted)
    custom_tools = tuple(tools)
    dags: dict[str, DAG] = {}
    owners: dict[str, Path] = {}
    broken: list[tuple[Path, str]] = []
    for path in files:
        result = _cached_load(path)
        if isinstance(result, WorkflowValidationError):
            broken.append((path, str(result)))
            continue
        dag_id = dag_id_for(result)
        if dag_id in owners:
            broken.append(
                (
                    path,
                    f"{path}: workflow {result.name!r} has the DAG id {dag_id!r}, already used by "
                    f"{owners[dag_id]}; give one of them another name (or set config.airflow.dag_id)",
                )
            )
            continue
        owners[dag_id] = path
        if wanted is not None and dag_id != wanted:
            continue
        try:
            dags[dag_id] = build_dag(result, tools=custom_tools, working_dir=working_dir)
        except WorkflowValidationError as exc:
            del owners[dag_id]
            broken.append((path, str(exc).replace("<workflow>", str(path))))
    for path, message in broken:
        placeholder = _report_broken(path, message, taken=set(owners) | set(dags))
        if wanted is None or placeholder.dag_id == wanted:
            dags[placeholder.dag_id] = placeholder
    for dag_id, dag in dags.items():
        globals_dict[GLOBAL_PREFIX + dag_id] = dag
    return dags


def _caller_folder(globals_dict: MutableMapping[str, Any]) -> Path:
    file = globals_dict.get("__file__")
    if file:
        return Path(file).resolve().parent
    return Path.cwd()


def _workflow_files(root: Path, patterns: tuple[str, ...], recursive: bool) -> list[Path]:
    found: set[Path] = set()
    for pattern in patterns:
        found.update(root.rglob(pattern) if recursive else root.glob(pattern))
    return sorted(
        p
        for p in found
        if p.is_file() and not any(part.startswith(".") for part in p.relative_to(root).parts)
    )


def _parsing_context_dag_id() -> str | None:
    try:
        from airflow.sdk import get_parsing_context
    except ImportError:  # pragma: no cover - Airflow always provides it on 3.3
        return None
    dag_id = get_parsing_context().dag_id
    return str(dag_id) if dag_id else None


def scan_dag_id(text: str) -> str | None:
    """Read a workflow file's DAG id from its ``name:`` (or ``dag_id:``) line, without parsing the file."""
    from airflow_provider_agentloom.operators.context import safe_id

    override = _DAG_ID_LINE.search(text)
    if override is not None:
        return _unquote(override.group(1))
    name = _NAME_LINE.search(text)
    return safe_id(_unquote(name.group(1))) if name is not None else None


def _unquote(value: str) -> str:
    value = value.split(" #", 1)[0].strip()
    if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
        return value[1:-1]
    return value


def _files_for_dag(files: list[Path], dag_id: str) -> list[Path]:
    """The files that may hold ``dag_id``, found by their ``name:`` lines (all files if none says)."""
    from airflow_provider_agentloom.operators.context import safe_id

    if dag_id.startswith("agentloom_invalid__"):
        return [p for p in files if f"agentloom_invalid__{safe_id(p.stem)}" == dag_id]
    matches = []
    for path in files:
        try:
            text = path.read_text(encoding="utf-8")
        except OSError:
            continue
        if scan_dag_id(text) == dag_id:
            matches.append(path)
    if not matches:
        log.warning("No workflow file names the DAG %r on its name: line; loading them all", dag_id)
        return files
    return matches


def _cached_load(path: Path) -> Workflow | WorkflowValidationError:
    key = str(path)
    entry = _CACHE.get(key)
    if entry is not None and _stamp_of(entry.stamp) == entry.stamp:
        return entry.result
    stamp = _stamp_of(((key, 0, 0),))
    try:
        text_head = path.read_text(encoding="utf-8")
    except OSError as exc:
        result: Workflow | WorkflowValidationError = WorkflowValidationError.from_message(str(path), str(exc))
    else:
        if not _WORKFLOW_KEYS.search(text_head):
            result = WorkflowValidationError.from_message(
                str(path), "not a workflow: no top-level 'name:' or 'steps:' key"
            )
        else:
            try:
                result = load_workflow(path)
            except WorkflowValidationError as exc:
                result = exc
    if isinstance(result, Workflow):
        stamp = _stamp_of(((key, 0, 0), *((p, 0, 0) for p in _child_files(result))))
    _CACHE[key] = _Entry(stamp, result)
    return result


def _stamp_of(stamp: tuple[tuple[str, int, int], ...]) -> tuple[tuple[str, int, int], ...]:
    fresh = []
    for path, _, _ in stamp:
        try:
            info = os.stat(path)
        except OSError:
            fresh.append((path, -1, -1))
        else:
            fresh.append((path, info.st_mtime_ns, info.st_size))
    return tuple(fresh)


def _child_files(workflow: Workflow) -> list[str]:
    files = []
    for step in workflow.steps:
        if isinstance(step, SubworkflowStep) and step._child is not None:
            if step.workflow_path and step._child.source_path:
                files.append(step._child.source_path)
            files.extend(_child_files(step._child))
    return files


def _report_broken(path: Path, message: str, *, taken: set[str]) -> DAG:
    """Report a workflow file that does not load, without hiding the other workflows.

    Two signals, because Airflow keeps neither perfectly on its own:

    - a placeholder DAG tagged ``invalid`` (the file's DAG id when its ``name:`` line can be
      read, else ``agentloom_invalid__<file>``) whose docs and only task show the error: always
      visible, and a DAG that breaks keeps its run history;
    - an import error under the YAML file's own path in the DagBag executing this loader (UI
      *Import errors*, ``airflow dags list-import-errors``, REST ``importErrors``). Airflow's
      bundle refresh deletes import errors of non-``.py`` paths, so this one disappears for up
      to ``min_file_process_interval`` after each refresh and lingers that long after a fix.

    Raising instead would make Airflow drop every DAG of the loader file.
    """
    log.error("Workflow file %s does not load: %s", path, message)
    bag = _executing_dagbag()
    if bag is not None:
        try:
            bag.import_errors[_import_error_key(bag, path)] = message
        except Exception:  # best effort: the placeholder DAG below is the reliable signal
            log.debug("Could not record the import error of %s", path, exc_info=True)
    return _placeholder_dag(path, message, taken)


def _placeholder_dag(path: Path, message: str, taken: set[str]) -> DAG:
    from airflow_provider_agentloom.dag_factory import TAG
    from airflow_provider_agentloom.operators.context import safe_id
    from airflow_provider_agentloom.operators.invalid import InvalidWorkflowOperator

    try:
        scanned = scan_dag_id(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError):
        scanned = None
    dag_id = scanned if scanned and scanned not in taken else f"agentloom_invalid__{safe_id(path.stem)}"
    first_line = message.splitlines()[0] if message else "invalid workflow"
    dag = DAG(
        dag_id=dag_id,
        schedule=None,
        tags=[TAG, INVALID_TAG],
        description=f"Invalid workflow file: {first_line}"[:1000],
        doc_md=f"# Invalid workflow file\n\n`{path}` does not load:\n\n```\n{message}\n```\n",
    )
    InvalidWorkflowOperator(
        task_id="invalid_workflow", message=message, dag=dag, doc_md=f"```\n{message}\n```"
    )
    return dag


def _executing_dagbag() -> Any:
    """Find the DagBag whose module import is running this loader (None outside a DagBag)."""
    try:
        from airflow.dag_processing.dagbag import DagBag
    except ImportError:  # pragma: no cover
        return None
    frame = sys._getframe(1)
    while frame is not None:
        candidate = frame.f_locals.get("self")
        if isinstance(candidate, DagBag):
            return candidate
        frame = frame.f_back  # type: ignore[assignment]
    return None


def _import_error_key(bag: Any, path: Path) -> str:
    bundle_path = getattr(bag, "bundle_path", None)
    if bundle_path:
        try:
            return str(path.resolve().relative_to(Path(bundle_path).resolve()))
        except ValueError:
            pass
    return str(path)
