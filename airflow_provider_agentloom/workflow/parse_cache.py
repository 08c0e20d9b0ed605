"""A disk cache of validated workflows: a re-parse of an unchanged file skips YAML and validation.

Airflow's dag-processor parses the loader file in a fresh child process each time (every
``min_file_process_interval``), so a cache inside one process never helps it: every parse read
and validated every workflow file again. This cache keeps each valid workflow, as its validated
model, in a file of its own:

- ``<folder>/<code fingerprint>/<sha256 of the path>.json``: two lines of JSON, the *key* (the path,
  the ``[agentloom] workflow_*`` limits without the time limit, and the SHA-256 of the text of the
  file and of each subworkflow file it was validated from), then the workflow.
- A hit needs the same key, read again from the files now: a changed byte in the file or in any of
  its subworkflow files, or other limits, is a miss. The code fingerprint (the sources of this
  folder, ``workflow/``, which read, validate and define what an entry holds; Python; pydantic)
  names the sub-folder, so an upgrade never reads a model of other code. The first process of a
  new fingerprint removes the sub-folders no process wrote to for a week (two versions that share
  a home during an upgrade each keep theirs).
- Only valid workflows are kept: a broken file is read again each time, so its message is fresh.
- Nothing is pickled: an entry is JSON, and reading one builds only this folder's own models,
  enum members and graph dataclasses, by name from a fixed table, so a planted or foreign file can
  never run code. The cache is still read only from folders owned by this user that no one else
  may write to (checked at every read, each entry file too), because an entry is trusted to hold a
  *valid* workflow (see :func:`_decode`). Anything unusable (a read-only disk, a foreign owner, a
  truncated or non-JSON entry) is a miss, logged once, never an error: the file is then parsed as
  without it.

No Airflow import: the loader passes the folder (``[agentloom] parse_cache_dir``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import logging
import os
import shutil
import stat
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import date, datetime
from enum import Enum
from functools import cache
from pathlib import Path
from typing import cast

from pydantic import BaseModel

from airflow_provider_agentloom.workflow import models
from airflow_provider_agentloom.workflow.graph import ImplicitEdge, StepGraph, StepReads
from airflow_provider_agentloom.workflow.limits import ParseLimits
from airflow_provider_agentloom.workflow.models import SubworkflowStep, Workflow

__all__ = ["ParseCache", "code_fingerprint", "subworkflow_sources"]

log = logging.getLogger(__name__)

FORMAT = 2
"""Bumped when the layout of an entry changes (2: JSON instead of pickle)."""

STALE_AFTER_SECONDS = 7 * 24 * 3600
"""Another fingerprint's sub-folder unwritten this long goes (at a new fingerprint's first write)."""

_SOURCES = Path(__file__).resolve().parent
"""``workflow/``: the code that reads and validates a workflow, and every class an entry holds."""

Key = dict[str, object]
"""``{"format", "path", "limits", "files": [[file, sha256 of its bytes], ...]}``: what a hit must match."""

JSON = None | bool | int | float | str | list["JSON"] | dict[str, "JSON"]
"""A JSON document, as :func:`json.loads` returns it."""


@cache
def code_fingerprint() -> str:
    """What an entry's models were made by: the sources of ``workflow/``, Python and pydantic."""
    import pydantic

    digest = hashlib.sha256(f"{FORMAT}|{sys.version}|{pydantic.VERSION}\n".encode())
    for path in sorted(_SOURCES.glob("*.py")):
        info = path.stat()
        digest.update(f"{path.name}|{info.st_size}|{info.st_mtime_ns}\n".encode())
    return digest.hexdigest()[:24]


class ParseCache:
    """The validated workflows kept under one folder (see the module doc)."""

    def __init__(self, folder: str | os.PathLike[str]) -> None:
        self.root = Path(folder)
        self.folder = self.root / code_fingerprint()
        self._ready = False
        self._warned = False

    def get(self, path: str, limits: ParseLimits) -> Workflow | None:
        """The cached workflow of ``path`` when its files and limits are unchanged, else None."""
        entry = self._entry(path)
        try:
            if not self._private(self.folder) or not self._private(entry):
                return None
            with open(entry, "rb") as handle:
                if not _still(json.loads(handle.readline()), path, limits):
                    return None
                workflow = _loads(handle.readline())
        except FileNotFoundError:
            return None
        except Exception as exc:  # a truncated, non-JSON or foreign entry: a miss (it is written again)
            self._warn(f"could not read {entry}: {type(exc).__name__}: {exc}")
            return None
        return workflow if isinstance(workflow, Workflow) else None

    def put(self, path: str, limits: ParseLimits, workflow: Workflow) -> None:
        """Keep ``workflow``, just read from ``path`` within ``limits``; never raises."""
        try:
            key = _key(path, limits, workflow)
            if key is None or not self._prepare():
                return
            lines = [_dumps(key), _dumps(_encode(workflow))]  # before any file: a value JSON cannot hold
            descriptor, temporary = tempfile.mkstemp(dir=self.folder, prefix=".", suffix=".tmp")
            try:
                with open(descriptor, "w", encoding="utf-8") as handle:
                    handle.write("\n".join(lines) + "\n")
                os.replace(temporary, self._entry(path))  # readers see the old entry or the new one
            except BaseException:
                with contextlib.suppress(OSError):
                    os.unlink(temporary)
                raise
        except Exception as exc:  # a read-only or full disk, a value JSON cannot hold
            self._warn(f"could not write to {self.folder}: {type(exc).__name__}: {exc}")

    def _entry(self, path: str) -> Path:
        return self.folder / (
            hashlib.sha256(path.encode(errors="surrogateescape")).hexdigest()[:32] + ".json"
        )

    def _prepare(self) -> bool:
        """Create this fingerprint's folder (private) and drop the other fingerprints' ones, once."""
        if self._ready:
            return True
        fresh = not self.folder.is_dir()
        os.makedirs(self.root, mode=0o700, exist_ok=True)  # the mode applies to the last folder only
        os.makedirs(self.folder, mode=0o700, exist_ok=True)
        for folder in (self.root, self.folder):
            if not self._private(folder):
                return False
        if fresh:
            self._remove_stale_folders()
        self._ready = True
        return True

    def _remove_stale_folders(self) -> None:
        stale = time.time() - STALE_AFTER_SECONDS
        for other in self.root.iterdir():
            with contextlib.suppress(OSError):
                info = other.lstat()
                if other != self.folder and stat.S_ISDIR(info.st_mode) and info.st_mtime < stale:
                    shutil.rmtree(other, ignore_errors=True)

    def _private(self, path: Path) -> bool:
        """Whether only this user could have written ``path`` (its workflow is trusted to be valid)."""
        try:
            info = os.lstat(path)
        except FileNotFoundError:
            return False
        if (
            info.st_uid != os.geteuid()
            or info.st_mode & (stat.S_IWGRP | stat.S_IWOTH)
            or stat.S_ISLNK(info.st_mode)
        ):
            self._warn(f"{path} is not private to this user (owner {info.st_uid}, mode {oct(info.st_mode)})")
            return False
        return True

    def _warn(self, message: str) -> None:
        if not self._warned:
            self._warned = True
            log.warning("The workflow parse cache is not used: %s", message)


def _key(path: str, limits: ParseLimits, workflow: Workflow) -> Key | None:
    """The key of ``workflow`` from the texts it was validated from (a later change is a miss)."""
    texts = [(path, workflow._source_text), *subworkflow_sources(workflow)]
    if any(text is None for _, text in texts):
        return None
    files = [[file, hashlib.sha256(str(text).encode()).hexdigest()] for file, text in texts]
    return {"format": FORMAT, "path": path, "limits": _limits_key(limits), "files": files}


def _still(key: object, path: str, limits: ParseLimits) -> bool:
    """Whether a stored key holds now: same path and limits, every file's bytes the same."""
    if not isinstance(key, dict) or key.get("format") != FORMAT or key.get("path") != path:
        return False
    files = key.get("files")
    if key.get("limits") != _limits_key(limits) or not isinstance(files, list):
        return False
    return all(
        isinstance(pair, list) and len(pair) == 2 and _sha256(str(pair[0])) == pair[1] for pair in files
    )


def _limits_key(limits: ParseLimits) -> str:
    return repr(limits.without_time_limit())


def _sha256(file: str) -> str | None:
    """The SHA-256 of a file's bytes: of its text, as ``read_workflow_text`` decodes it unchanged."""
    try:
        with open(file, "rb") as handle:
            return hashlib.sha256(handle.read()).hexdigest()
    except OSError:
        return None


def subworkflow_sources(workflow: Workflow) -> list[tuple[str, str | None]]:
    """Each subworkflow file ``workflow`` loaded, at any depth, with the text it was validated from."""
    found: list[tuple[str, str | None]] = []
    for step in workflow.steps:
        if isinstance(step, SubworkflowStep) and step._child is not None:
            if step.workflow_path:
                found.append((step._child.source_path or "", step._child._source_text))
            found.extend(subworkflow_sources(step._child))
    return found


# The JSON of an entry, and why it is read with ``model_construct``, not ``model_validate_json``.
# An entry is keyed by the path, the limits and the SHA-256 of every file the workflow was validated
# from, in a folder named by the code fingerprint; it is invalid as soon as one of those differs
# (``_still``), or when it is not this user's private file. Within a valid entry the data was
# validated by the parser before ``put`` wrote it, by this very code: validating it again would
# build every model's validator in each dag-processor child (~40 ms, which ``defer_build`` saves)
# for nothing, so the models are rebuilt with ``model_construct``, as pickle rebuilt them, but only
# from classes named in ``_MODELS``, ``_ENUMS`` and ``_DATACLASSES``, and from JSON values. Plain
# ``model_dump_json`` would lose what pydantic does not dump: which class a value was (a step
# type, a date or a datetime), the fields a user set, and the parser's private attributes (source
# path and text, child workflows, the step graph). So each model is written as
# ``{"$model": name, "fields", "set", "private"}``, and the few other non-JSON values as
# ``{"$<kind>": ...}``; a plain mapping that has a key starting with ``$`` is written as
# ``{"$dict": [[key, value], ...]}`` so user data can never pass for a tag.

_TAG = "$"

_MODELS: dict[str, type[BaseModel]] = {
    name: value
    for name, value in vars(models).items()
    if isinstance(value, type) and issubclass(value, BaseModel) and value.__module__ == models.__name__
}
_ENUMS: dict[str, type[Enum]] = {
    name: value
    for name, value in vars(models).items()
    if isinstance(value, type) and issubclass(value, Enum) and value.__module__ == models.__name__
}
_DATACLASSES: dict[str, type] = {"StepReads": StepReads, "ImplicitEdge": ImplicitEdge}
"""Every class an entry may name: the workflow models and enums, and the graph's dataclasses."""

_DERIVED = frozenset({"_source_map"})
"""Private attributes not stored: made again from the source text on first use."""


def _dumps(document: object) -> str:
    return json.dumps(document, ensure_ascii=False, allow_nan=False, separators=(",", ":"))


def _encode(value: object) -> JSON:
    """``value`` as JSON; raises TypeError for what an entry cannot hold (then nothing is written)."""
    if value is None or isinstance(value, bool | int | float | str) and not isinstance(value, Enum):
        return cast("JSON", value)
    if isinstance(value, list):
        return [_encode(item) for item in value]
    if isinstance(value, dict):
        if not all(isinstance(key, str) for key in value):
            raise TypeError("a mapping with keys that are not strings")
        plain: dict[str, JSON] = {key: _encode(item) for key, item in value.items()}
        if any(key.startswith(_TAG) for key in plain):  # as pairs: a mapping would be read as a tag
            return {"$dict": [[key, item] for key, item in plain.items()]}
        return plain
    if isinstance(value, tuple):
        return {"$tuple": [_encode(item) for item in value]}
    if isinstance(value, frozenset):
        return {"$frozenset": [_encode(item) for item in value]}
    if isinstance(value, datetime):
        return {"$datetime": value.isoformat()}
    if isinstance(value, date):
        return {"$date": value.isoformat()}
    return _encode_object(value)


def _encode_object(value: object) -> JSON:
    """A workflow model, enum member or graph dataclass, tagged with its class."""
    name = type(value).__name__
    if isinstance(value, Enum) and _ENUMS.get(name) is type(value):
        return {"$enum": name, "value": _encode(value.value)}
    if isinstance(value, BaseModel) and _MODELS.get(name) is type(value):
        private = {
            key: item for key, item in (value.__pydantic_private__ or {}).items() if key not in _DERIVED
        }
        if isinstance(private.get("_graph"), StepGraph):  # its steps are the workflow's own: not stored twice
            graph = private["_graph"]
            private["_graph"] = {key: item for key, item in _fields_of(graph).items() if key != "steps"}
        return {
            "$model": name,
            "fields": _encode(dict(value.__dict__)),
            "set": _encode(sorted(value.model_fields_set)),
            "private": _encode(private),
        }
    if _DATACLASSES.get(name) is type(value):
        return {"$dataclass": name, "fields": _encode(_fields_of(value))}
    raise TypeError(f"a {type(value).__qualname__} value")


def _fields_of(value: object) -> dict[str, object]:
    return {field.name: getattr(value, field.name) for field in dataclasses.fields(value)}  # type: ignore[arg-type]


def _loads(line: bytes) -> object:
    """The value ``_encode`` wrote, from JSON: builds only the classes of the tables above, runs no code."""
    return json.loads(line, object_hook=_revive)  # each mapping as the parser finishes it, inner ones first


def _revive(value: dict[str, object]) -> object:
    """A mapping of the JSON, or the value its tag stands for (an unknown tag or class: KeyError, a miss)."""
    tag = next(iter(value), "")
    return _TAGGED[tag](value) if tag.startswith(_TAG) else value


def _revive_model(value: dict[str, object]) -> object:
    cls = _MODELS[cast("str", value["$model"])]
    fields = cast("dict[str, object]", value["fields"])
    model = cls.model_construct(_fields_set=set(cast("list[str]", value["set"])), **fields)
    private = cast("dict[str, object]", value["private"])
    graph = private.get("_graph")
    if isinstance(graph, dict) and isinstance(model, Workflow):
        private["_graph"] = StepGraph(steps={step.id: step for step in model.steps}, **graph)
    known = model.__pydantic_private__ or {}
    for key, item in private.items():
        if key not in known:
            raise ValueError(f"{cls.__name__} has no private attribute {key!r}")
        known[key] = item
    return model


_TAGGED: dict[str, Callable[[dict[str, object]], object]] = {
    "$dict": lambda value: dict(cast("list[tuple[str, object]]", value["$dict"])),
    "$tuple": lambda value: tuple(cast("list[object]", value["$tuple"])),
    "$frozenset": lambda value: frozenset(cast("list[object]", value["$frozenset"])),
    "$datetime": lambda value: datetime.fromisoformat(cast("str", value["$datetime"])),
    "$date": lambda value: date.fromisoformat(cast("str", value["$date"])),
    "$enum": lambda value: _ENUMS[cast("str", value["$enum"])](value["value"]),
    "$model": _revive_model,
    "$dataclass": lambda value: _DATACLASSES[cast("str", value["$dataclass"])](
        **cast("dict[str, object]", value["fields"])
    ),
}
"""How each tag is read back."""
