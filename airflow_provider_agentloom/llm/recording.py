"""``RecordingProvider``: wraps a provider and writes its replies (and tool results) as a mock fixture."""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, TypeVar

from airflow_provider_agentloom.llm.base import LLMProvider, OnChunk
from airflow_provider_agentloom.llm.errors import FixtureError
from airflow_provider_agentloom.llm.fixtures import (
    FIXTURE_VERSION,
    RECORD_TOOLS_KEY,
    VERSION_KEY,
    FixtureEntry,
    check_version,
    prompt_hash,
)
from airflow_provider_agentloom.llm.telemetry import telemetry
from airflow_provider_agentloom.llm.types import ChatRequest, ChatResponse, ToolCallRecord
from airflow_provider_agentloom.workflow.redaction import Mask

try:  # POSIX: serialise concurrent writers (Airflow runs tasks as separate processes)
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None  # type: ignore[assignment]

__all__ = ["RecordingProvider"]


class _RecordingFile:
    """What this process recorded into one file; merged into the file's current content at each flush.

    A step's turns: a request for a step that carries no assistant message starts the step
    afresh (a new run, a retry); later requests of the same step (tool-loop turns) append.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self.record_tools = False
        self._lock = threading.Lock()
        self._recorded: dict[str, Any] = {}
        self._by_call_id: dict[str, dict[str, Any]] = {}
        self._read()  # fail early on a file we would not be able to merge with

    def add(self, request: ChatRequest, entry: FixtureEntry, data: dict[str, Any]) -> None:
        """Record ``data`` (``entry`` as JSON, masked) as the reply to ``request``."""
        with self._lock:
            step_id = request.step_id
            if step_id:
                first_turn = not any(m.role == "assistant" for m in request.messages)
                turns = self._recorded.get(step_id)
                if first_turn or not isinstance(turns, list):
                    turns = [] if first_turn else self._file_turns(step_id)
                    self._recorded[step_id] = turns
                turns.append(data)
            self._recorded[prompt_hash(request)] = data
            for call in entry.tool_calls:
                self._by_call_id[call.id] = data
            self._flush()

    def add_tool_result(self, record: ToolCallRecord, mask: Mask) -> bool:
        with self._lock:
            data = self._by_call_id.get(record.id)
            if data is None:
                return False
            data.setdefault("tool_results", {})[record.id] = mask(
                {"name": record.name, "result": record.result, "error": record.error}
            )
            self._flush()
            return True

    def _file_turns(self, step_id: str) -> list[Any]:
        existing = self._read().get(step_id)
        return list(existing) if isinstance(existing, list) else []

    def _read(self) -> dict[str, Any]:
        if not self.path.exists():
            return {}
        try:
            data = json.loads(self.path.read_text(encoding="utf-8") or "{}")
        except ValueError:
            raise FixtureError(f"Recording file {str(self.path)!r} exists but is not valid JSON") from None
        if not isinstance(data, dict):
            raise FixtureError(f"Recording file {str(self.path)!r} must hold a JSON object")
        check_version(data, repr(str(self.path)))
        return data

    def _flush(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with _file_lock(self.path):
            merged = self._read()
            merged.update(self._recorded)
            merged[VERSION_KEY] = FIXTURE_VERSION
            # Sticky: once a file holds tool results, a replay of it never runs a tool live.
            merged[RECORD_TOOLS_KEY] = merged.get(RECORD_TOOLS_KEY) is True or self.record_tools
            fd, tmp = tempfile.mkstemp(prefix=self.path.name + ".", suffix=".tmp", dir=self.path.parent)
            try:
                with os.fdopen(fd, "w", encoding="utf-8") as handle:
                    json.dump(merged, handle, indent=2, ensure_ascii=False, default=str)
                os.replace(tmp, self.path)
            except BaseException:
                with contextlib.suppress(OSError):
                    os.unlink(tmp)
                raise


_V = TypeVar("_V")


def _unmasked(value: _V) -> _V:
    return value


@contextlib.contextmanager
def _file_lock(path: Path) -> Iterator[None]:
    if fcntl is None:  # pragma: no cover - Windows
        yield
        return
    with open(path.with_name(path.name + ".lock"), "a+") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


_files: dict[Path, _RecordingFile] = {}
_files_lock = threading.Lock()


def _recording_file(path: str | Path) -> _RecordingFile:
    resolved = Path(path).resolve()
    with _files_lock:
        file = _files.get(resolved)
        if file is None:
            file = _files[resolved] = _RecordingFile(resolved)
        return file


class RecordingProvider(LLMProvider):
    """Delegate to ``wrapped`` and record each reply into ``output_path`` in the mock's fixture format.

    Each reply is written under its prompt hash and, when the request has a ``step_id``, appended
    to that step's list of turns; the file gets ``_version: 2`` and ``_record_tools`` (whether it
    holds tool results; once true it stays true), is merged with what it already holds and is
    rewritten atomically after every call. Every ``RecordingProvider`` of a process
    that names the same file shares one writer, so wrapping all providers of a gateway is safe.

    With ``record_tools`` the tool loop's results are stored too (``record_tool_call``, called
    through the gateway by ``run_tool_loop``), under the reply that asked for them, so a replay
    returns them without running the tools.

    :param wrapped: the provider that really answers.
    :param output_path: the fixture file to write.
    :param record_tools: also record the results of the model's tool calls.
    :param mask: applied to each entry before it is written, so a recording (which users commit)
        keeps no secret a reply or a tool result echoed (a task passes ``TaskSecrets.mask``).
    """

    def __init__(
        self,
        wrapped: LLMProvider,
        output_path: str | Path,
        record_tools: bool = False,
        *,
        mask: Mask | None = None,
    ) -> None:
        self.wrapped = wrapped
        self.mask: Mask = mask or _unmasked
        self.name = wrapped.name
        self.vendor = wrapped.vendor
        self.output_path = Path(output_path)
        self.record_tools = record_tools
        self._file = _recording_file(output_path)
        self._file.record_tools = self._file.record_tools or record_tools

    def __repr__(self) -> str:
        return f"RecordingProvider({self.wrapped!r}, output_path={str(self.output_path)!r})"

    def supports_model(self, model: str) -> bool:
        return self.wrapped.supports_model(model)

    async def complete(self, request: ChatRequest) -> ChatResponse:
        started = time.perf_counter()
        response = await self.wrapped.complete(request)
        self._capture(request, response, started)
        return response

    async def stream(self, request: ChatRequest, on_chunk: OnChunk | None = None) -> ChatResponse:
        started = time.perf_counter()
        response = await self.wrapped.stream(request, on_chunk)
        self._capture(request, response, started)
        return response

    def _capture(self, request: ChatRequest, response: ChatResponse, started: float) -> None:
        seconds = time.perf_counter() - started
        entry = FixtureEntry.from_response(response, latency_ms=seconds * 1000.0)
        self._file.add(request, entry, self.mask(entry.to_json()))
        telemetry().record_capture(response.provider or self.name, response.model or request.model, seconds)

    async def record_tool_call(self, record: ToolCallRecord) -> None:
        """Store a tool call's result under the recorded reply that asked for it (with ``record_tools``)."""
        if self.record_tools and not record.replayed:
            self._file.add_tool_result(record, self.mask)

    async def aclose(self) -> None:
        await self.wrapped.aclose()
