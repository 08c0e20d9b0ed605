"""A disk cache of validated workflows: a re-parse of an unchanged file skips YAML and validation.

Airflow's dag-processor parses the loader file in a fresh child process each time (every
``min_file_process_interval``), so a cache inside one process never helps it: every parse read
and validated every workflow file again. This cache keeps each valid workflow, as its validated
model, in a file of its own:

- ``<folder>/<code fingerprint>/<sha256 of the path>.pickle``: two pickles, the *key* (the path,
  the ``[agentloom] workflow_*`` limits without the time limit, and the SHA-256 of the text of the
  file and of each subworkflow file it was validated from), then the workflow.
- A hit needs the same key, read again from the files now: a changed byte in the file or in any of
  its subworkflow files, or other limits, is a miss. The code fingerprint (the sources of this
  folder, ``workflow/``, which read, validate and define what an entry holds; Python; pydantic)
  names the sub-folder, so an upgrade never unpickles a model of other code. The
  first process of a new fingerprint removes the sub-folders no process wrote to for a week (two
  versions that share a home during an upgrade each keep theirs).
- Only valid workflows are kept: a broken file is read again each time, so its message is fresh.
- Pickle runs code when it loads, so the cache is read only from folders owned by this user that no
  one else may write to (checked at every read, each entry file too): the trust of the dags folder
  itself, and of Python's own ``__pycache__``. Anything unusable (a read-only disk, a foreign owner,
  a truncated entry) is a miss, logged once, never an error: the file is then parsed as without it.

No Airflow import: the loader passes the folder (``[agentloom] parse_cache_dir``).
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import pickle  # noqa: TID251  (this code's own models, for this code and user only: see the module doc)
import shutil
import stat
import sys
import tempfile
import time
from functools import cache
from pathlib import Path

from airflow_provider_agentloom.workflow.limits import ParseLimits
from airflow_provider_agentloom.workflow.models import SubworkflowStep, Workflow

__all__ = ["ParseCache", "code_fingerprint", "subworkflow_sources"]

log = logging.getLogger(__name__)

FORMAT = 1
"""Bumped when the layout of an entry changes."""

STALE_AFTER_SECONDS = 7 * 24 * 3600
"""Another fingerprint's sub-folder unwritten this long goes (at a new fingerprint's first write)."""

_SOURCES = Path(__file__).resolve().parent
"""``workflow/``: the code that reads and validates a workflow, and every class an entry holds."""

Key = tuple[str, str, tuple[tuple[str, str], ...]]
"""(path, limits, ((file, sha256 of its bytes), ...)): what a hit must match."""


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
                key = pickle.load(handle)
                if not _still(key, path, limits):
                    return None
                workflow = pickle.load(handle)
        except FileNotFoundError:
            return None
        except Exception as exc:  # a truncated or foreign entry: a miss (it is written again)
            self._warn(f"could not read {entry}: {type(exc).__name__}: {exc}")
            return None
        return workflow if isinstance(workflow, Workflow) else None

    def put(self, path: str, limits: ParseLimits, workflow: Workflow) -> None:
        """Keep ``workflow``, just read from ``path`` within ``limits``; never raises."""
        try:
            key = _key(path, limits, workflow)
            if key is None or not self._prepare():
                return
            descriptor, temporary = tempfile.mkstemp(dir=self.folder, prefix=".", suffix=".tmp")
            try:
                with open(descriptor, "wb") as handle:
                    pickle.dump(key, handle, protocol=pickle.HIGHEST_PROTOCOL)
                    pickle.dump(workflow, handle, protocol=pickle.HIGHEST_PROTOCOL)
                os.replace(temporary, self._entry(path))  # readers see the old entry or the new one
            except BaseException:
                with contextlib.suppress(OSError):
                    os.unlink(temporary)
                raise
        except Exception as exc:  # a read-only or full disk, a model that does not pickle
            self._warn(f"could not write to {self.folder}: {type(exc).__name__}: {exc}")

    def _entry(self, path: str) -> Path:
        return self.folder / (
            hashlib.sha256(path.encode(errors="surrogateescape")).hexdigest()[:32] + ".pickle"
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
        """Whether only this user could have written ``path`` (it is trusted with pickle)."""
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
    hashes = tuple((file, hashlib.sha256(str(text).encode()).hexdigest()) for file, text in texts)
    return (path, _limits_key(limits), hashes)


def _still(key: object, path: str, limits: ParseLimits) -> bool:
    """Whether a stored key holds now: same path and limits, every file's bytes the same."""
    if not isinstance(key, tuple) or len(key) != 3 or key[0] != path or key[1] != _limits_key(limits):
        return False
    return all(_sha256(file) == digest for file, digest in key[2])


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
