"""The dags-folder loader: every workflow YAML next to a one-line ``.py`` becomes a DAG.

Put this in a ``.py`` file in your dags folder (Airflow only reads ``.py`` files)::

    from airflow_provider_agentloom.dag.loader import load_workflows  # airflow dag loader

    load_workflows(globals())

- A broken file never hides the others: whatever reading, parsing or building it raises becomes
  a placeholder DAG tagged ``invalid`` whose docs and only task show the error (file, line, key),
  and, as a best effort, an import error under the YAML file's own path (see
  :func:`_report_broken`); then the loader goes on with the next file. Nothing escapes
  :func:`load_workflows` but ``BaseException``\\s (Ctrl-C, Airflow's import timeout).
- Each file is read within the ``[agentloom] workflow_*`` limits (size, YAML nodes and nesting,
  steps, time; :mod:`~airflow_provider_agentloom.workflow.limits`). When Airflow's
  ``dagbag_import_timeout`` is about to stop the whole import, the files not read yet become
  placeholders instead, so the DAGs already built survive.
- A placeholder keeps the file's DAG id when its ``name:`` line can be read and no valid DAG owns
  that id (a DAG that breaks keeps its run history); else it is named from the file's path,
  ``agentloom_invalid__<path>``, unique in the folder. It never takes a valid DAG's id.
- Two files whose workflows get the same DAG id: the second is reported, naming both files.
- A worker that re-imports the loader to run one task parses and builds only that DAG: it finds
  the file by reading each file's ``name:`` line, without parsing the others (all files for a
  placeholder, so it gets the id the full parse gave it).
- Parsed workflows are cached per process by path, modification time and size, and on disk by
  their text (``[agentloom] parse_cache_dir``, :mod:`~airflow_provider_agentloom.workflow.parse_cache`):
  Airflow parses the loader file in a fresh process each time, which then reads only what changed.
- The pools of model connections with ``max_concurrent_calls`` are created or resized after each
  DAG is built (:mod:`~airflow_provider_agentloom.dag.pools`); one that cannot be makes the file a
  placeholder saying why, since Airflow never schedules a task whose pool is missing.
- Python's cyclic garbage collector is paused while the folder loads: what the loader builds is
  kept, so a collection would only walk it again (a fifth of a warm parse).
"""

from __future__ import annotations

import contextlib
import dataclasses
import gc
import hashlib
import logging
import os
import re
import signal
from collections import Counter
from collections.abc import Iterable, Iterator, MutableMapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from airflow.sdk import DAG

from airflow_provider_agentloom import _airflow
from airflow_provider_agentloom.dag import from_file, pools
from airflow_provider_agentloom.dag.build import TAG, dag_id_for
from airflow_provider_agentloom.dag.checks import usable_dag_id
from airflow_provider_agentloom.dag.from_file import build_workflow_dag, contained
from airflow_provider_agentloom.dag.pools import PoolSyncError
from airflow_provider_agentloom.exceptions import WorkflowValidationError
from airflow_provider_agentloom.operators.invalid import InvalidWorkflowOperator
from airflow_provider_agentloom.plan.ids import MAX_ID, safe_id
from airflow_provider_agentloom.settings import parse_cache_dir, workflow_limits
from airflow_provider_agentloom.tools.base import BaseTool
from airflow_provider_agentloom.workflow.limits import ParseLimits, ParseTimeoutError, read_workflow_text
from airflow_provider_agentloom.workflow.models import Workflow
from airflow_provider_agentloom.workflow.parse_cache import ParseCache, subworkflow_sources

log = logging.getLogger(__name__)

DEFAULT_PATTERNS = ("*.yaml", "*.yml")
GLOBAL_PREFIX = "agentloom_dag__"
INVALID_TAG = "invalid"
INVALID_PREFIX = "agentloom_invalid__"

_NAME_LINE = re.compile(r"^name:[ \t]*(.+?)[ \t]*$", re.MULTILINE)
_DAG_ID_LINE = re.compile(r"^[ \t]+dag_id:[ \t]*(.+?)[ \t]*$", re.MULTILINE)
_IMPORT_MARGIN_SECONDS = 2.0


@dataclass
class _Entry:
    stamp: tuple[tuple[str, int, int], ...]
    limits: ParseLimits
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
    globals_dict = globals_dict if globals_dict is not None else {}
    root = Path(folder) if folder is not None else _caller_folder(globals_dict)
    dags: dict[str, DAG] = {}
    try:
        cache_dir = parse_cache_dir()
        disk = ParseCache(cache_dir) if cache_dir else None
        # The dags folder itself: a workflow in a sub-folder may name a child anywhere in it.
        limits = workflow_limits().allowing(str(root.resolve()))
        folder_load = _FolderLoad(root, limits, tuple(tools), working_dir, disk)
        for_a_task = _parsing_context_dag_id() is not None
        with _collector_paused(), pools.one_look_per_load(for_a_task=for_a_task):
            folder_load.run(_workflow_files(root, tuple(patterns), recursive), dags)
    except Exception:  # never reached by a bad file (each is contained); a bug must not drop the others
        log.exception("The AgentLoom loader failed in %s; keeping the %d DAGs built so far", root, len(dags))
    for dag_id, dag in dags.items():
        globals_dict[GLOBAL_PREFIX + dag_id] = dag
    return dags


@contextlib.contextmanager
def _collector_paused() -> Iterator[None]:
    """Pause the cyclic garbage collector (if it runs) until the block ends."""
    paused = gc.isenabled()
    if paused:
        gc.disable()
    try:
        yield
    finally:
        if paused:
            gc.enable()


class _FolderLoad:
    """One pass over a folder's workflow files: DAGs first, then a placeholder per broken file."""

    def __init__(
        self,
        root: Path,
        limits: ParseLimits,
        tools: tuple[BaseTool, ...],
        working_dir: str | None,
        disk: ParseCache | None = None,
    ) -> None:
        self.root = root
        self.limits = limits
        self.tools = tools
        self.working_dir = working_dir
        self.disk = disk
        self.owners: dict[str, Path] = {}
        self.broken: list[tuple[Path, str]] = []

    def run(self, files: list[Path], dags: dict[str, DAG]) -> None:
        every_file = files
        wanted = _parsing_context_dag_id()
        if wanted is not None:
            files = _files_for_dag(files, wanted, self.limits)
        for path in files:
            try:
                self._load_one(path, wanted, dags)
            except Exception as exc:  # the per-file functions contain everything; this is the last guard
                self.broken.append((path, str(contained(str(path), exc, "load"))))
        if not self.broken:
            return
        path_ids = placeholder_ids(every_file, self.root)  # from every file, as any worker computes them
        taken = set(self.owners) | set(dags)
        for path, message in self.broken:
            try:
                dag_id = _placeholder_id(path, path_ids[path], taken, self.limits)
                taken.add(dag_id)
                if wanted is None or dag_id == wanted:
                    dags[dag_id] = _report_broken(path, message, dag_id)
            except Exception:
                log.exception("Could not build the placeholder DAG of %s: %s", path, message)

    def _load_one(self, path: Path, wanted: str | None, dags: dict[str, DAG]) -> None:
        left = _import_seconds_left()
        if left is not None and left < _IMPORT_MARGIN_SECONDS:
            self.broken.append((path, _out_of_time(path, left)))
            return
        limits = self.limits
        if left is not None and left - _IMPORT_MARGIN_SECONDS < limits.parse_timeout:
            limits = dataclasses.replace(limits, parse_timeout=left - _IMPORT_MARGIN_SECONDS)
        result = _cached_load(path, limits, self.disk)
        if isinstance(result, WorkflowValidationError):
            self.broken.append((path, str(result)))
            return
        dag_id = dag_id_for(result)
        if dag_id in self.owners:
            self.broken.append(
                (
                    path,
                    f"{path}: workflow {result.name!r} has the DAG id {dag_id!r}, already used by "
                    f"{self.owners[dag_id]}; give one of them another name (or set config.airflow.dag_id)",
                )
            )
            return
        if wanted is not None and dag_id != wanted:
            self.owners[dag_id] = path
            return
        dag = build_workflow_dag(result, tools=self.tools, working_dir=self.working_dir)
        if isinstance(dag, WorkflowValidationError):
            self.broken.append((path, str(dag)))
            return
        if wanted is None and (problem := _pool_problem(path, dag)) is not None:
            self.broken.append((path, problem))
            return
        self.owners[dag_id] = path
        dags[dag_id] = dag


def _pool_problem(path: Path, dag: DAG) -> str | None:
    """Create or resize the pools of ``dag``'s model connections; the error that makes the file a
    placeholder, or None.

    Only a full parse does it (a worker running one task finds its task already placed). A pool
    nothing can keep is the placeholder's error (its tasks would never be scheduled); a failure of
    the API server leaves the DAG as it is, with an import error on the file saying why (see
    :mod:`~airflow_provider_agentloom.dag.pools`).
    """
    try:
        pools.ensure_pools(pools.pools_of(dag).values())
    except PoolSyncError as exc:
        message = f"{path}: {exc}"
        if not exc.transient:
            return message
        log.error("Workflow file %s: its DAG is kept as built, but %s", path, exc)
        bag = _airflow.executing_dagbag()
        if bag is not None:
            _airflow.record_import_error(bag, path, message)
    return None


def _out_of_time(path: Path, left: float) -> str:
    return (
        f"{path}: not loaded: the import of the loader file had only {max(left, 0):.1f} s left of "
        "Airflow's [core] dagbag_import_timeout, so the loader stopped before this file to keep the "
        "DAGs already built (raise dagbag_import_timeout, or split the folder across loader files)"
    )


def _import_seconds_left() -> float | None:
    """Seconds before the process's interval timer fires (Airflow's DagBag import timeout), if one is set."""
    try:
        left, _ = signal.getitimer(signal.ITIMER_REAL)
    except (AttributeError, OSError, ValueError):  # pragma: no cover - not on this platform
        return None
    return left if left > 0 else None


def _caller_folder(globals_dict: MutableMapping[str, Any]) -> Path:
    file = globals_dict.get("__file__")
    if file:
        return Path(file).resolve().parent
    return Path.cwd()


def _workflow_files(root: Path, patterns: tuple[str, ...], recursive: bool) -> list[Path]:
    """Every non-hidden entry matching ``patterns`` that is not a folder (broken links and FIFOs too:
    each becomes a placeholder saying why, never a silent skip). Folder links are followed once."""
    found: set[Path] = set()
    if not recursive:
        found = {path for pattern in patterns for path in root.glob(pattern)}
    else:
        seen: set[tuple[int, int]] = set()
        for folder, subfolders, names in os.walk(root, followlinks=True, onerror=_walk_error):
            try:
                info = os.stat(folder)
            except OSError:
                continue
            if (info.st_dev, info.st_ino) in seen:  # a link back up the tree
                subfolders[:] = []
                continue
            seen.add((info.st_dev, info.st_ino))
            subfolders[:] = [name for name in subfolders if not name.startswith(".")]
            for name in names:
                path = Path(folder, name)
                if any(path.relative_to(root).match(pattern) for pattern in patterns):
                    found.add(path)
    return sorted(
        path
        for path in found
        if not path.is_dir() and not any(part.startswith(".") for part in path.relative_to(root).parts)
    )


def _walk_error(error: OSError) -> None:
    log.warning(
        "The AgentLoom loader cannot list %s: %s; its workflows are not loaded", error.filename, error
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


def _scan_file(path: Path, limits: ParseLimits) -> str | None:
    try:
        return scan_dag_id(read_workflow_text(path, limits))
    except WorkflowValidationError:
        return None


def _files_for_dag(files: list[Path], dag_id: str, limits: ParseLimits) -> list[Path]:
    """The files that may hold ``dag_id``, found by their ``name:`` lines (all files if none says).

    A placeholder's id (or a workflow named like one) needs every file: which id a placeholder
    gets depends on the DAG ids of all the others.
    """
    if dag_id.startswith(INVALID_PREFIX):
        return files
    matches = [path for path in files if _scan_file(path, limits) == dag_id]
    if not matches:
        log.warning("No workflow file names the DAG %r on its name: line; loading them all", dag_id)
        return files
    return matches


def placeholder_ids(files: list[Path], root: Path) -> dict[Path, str]:
    """The path-derived placeholder id of each file: ``agentloom_invalid__<relative path>``, unique.

    Where two paths give the same id (``a b/x.yaml`` and ``a_b/x.yaml``), or an id would be too
    long for Airflow, a short hash of the path is appended.
    """
    names = {path: INVALID_PREFIX + safe_id(_relative(path, root)) for path in files}
    counts = Counter(names.values())
    return {
        path: name if counts[name] == 1 and len(name) <= MAX_ID else _hashed(name, _relative(path, root))
        for path, name in names.items()
    }


def _relative(path: Path, root: Path) -> str:
    try:
        return path.relative_to(root).as_posix()
    except ValueError:
        return path.as_posix()


def _hashed(name: str, key: str) -> str:
    digest = hashlib.sha1(key.encode(errors="surrogateescape"), usedforsecurity=False).hexdigest()[:10]
    return f"{name[: MAX_ID - 12]}__{digest}"


def _placeholder_id(path: Path, path_id: str, taken: set[str], limits: ParseLimits) -> str:
    """The file's scanned DAG id when usable and free, else its path id (made unique against ``taken``)."""
    scanned = _scan_file(path, limits)
    if scanned and scanned not in taken and usable_dag_id(scanned):
        return scanned
    candidate, attempt = path_id, 0
    while candidate in taken:  # a valid workflow named like this placeholder: it keeps its id
        attempt += 1
        candidate = _hashed(path_id, f"{path}#{attempt}")
    return candidate


def _cached_load(
    path: Path, limits: ParseLimits, disk: ParseCache | None = None
) -> Workflow | WorkflowValidationError:
    key = str(path)
    entry = _CACHE.get(key)
    if entry is not None and _same_limits(entry.limits, limits) and _stamp_of(entry.stamp) == entry.stamp:
        return entry.result
    stamp = _stamp_of(((key, 0, 0),))
    result: Workflow | WorkflowValidationError | None = disk.get(key, limits) if disk else None
    if result is None:
        result = from_file.read_workflow(path, limits)  # through the module: a test counts the reads
        if isinstance(result, Workflow) and disk is not None:
            disk.put(key, limits, result)
    if isinstance(result, ParseTimeoutError):
        _CACHE.pop(key, None)  # the next parse tries again, perhaps on a quieter machine
        return result
    if isinstance(result, Workflow):
        stamp = _stamp_of(((key, 0, 0), *((p, 0, 0) for p, _ in subworkflow_sources(result))))
    _CACHE[key] = _Entry(stamp, limits, result)
    return result


def _same_limits(cached: ParseLimits, now: ParseLimits) -> bool:
    """Whether a cached verdict still holds under ``now``."""
    return cached is now or cached.without_time_limit() == now.without_time_limit()


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


def _report_broken(path: Path, message: str, dag_id: str) -> DAG:
    """Report a workflow file that does not load, without hiding the other workflows.

    Two signals, because Airflow keeps neither perfectly on its own:

    - a placeholder DAG tagged ``invalid`` (see :func:`_placeholder_id` for its id) whose docs and
      only task show the error: always visible, and a DAG that breaks keeps its run history;
    - an import error under the YAML file's own path in the DagBag executing this loader (UI
      *Import errors*, ``airflow dags list-import-errors``, REST ``importErrors``). Airflow's
      bundle refresh deletes import errors of non-``.py`` paths, so this one disappears for up
      to ``min_file_process_interval`` after each refresh and lingers that long after a fix.

    Raising instead would make Airflow drop every DAG of the loader file.
    """
    log.error("Workflow file %s does not load: %s", path, message)
    bag = _airflow.executing_dagbag()
    if bag is not None:
        _airflow.record_import_error(bag, path, message)
    return _placeholder_dag(path, message, dag_id)


_DESCRIPTION_CHARS = 300
"""The most of an error's first line a placeholder's description holds (the whole error is in its
docs and its task)."""
_TITLE_CHARS = 120
"""The most of it its display name holds: the title of its overview page and its line in the DAG list."""


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _placeholder_dag(path: Path, message: str, dag_id: str) -> DAG:
    first_line = next((line.strip() for line in message.splitlines() if line.strip()), "invalid workflow")
    # Airflow's overview page shows neither the description nor the docs (they are behind the Details
    # tab and the docs button): the display name is its title, so it says the error too, with the
    # file's name instead of its full path.
    title = f"{dag_id} (invalid: {first_line.replace(str(path), path.name)})"
    dag = DAG(
        dag_id=dag_id,
        schedule=None,
        tags=[TAG, INVALID_TAG],
        description=f"Invalid workflow file: {_cut(first_line, _DESCRIPTION_CHARS)}",
        dag_display_name=_cut(title, _TITLE_CHARS),
        doc_md=f"# Invalid workflow file\n\n`{path}` does not load:\n\n```\n{message}\n```\n",
    )
    InvalidWorkflowOperator(
        task_id="invalid_workflow", message=message, dag=dag, doc_md=f"```\n{message}\n```"
    )
    return dag
