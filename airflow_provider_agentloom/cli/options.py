"""``RunOptions``: the command line's options of one run, kept so that ``resume`` can build its DAG again."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pydantic import JsonValue


@dataclass(frozen=True)
class RunOptions:
    """What ``agentloom run`` was given, besides the answers to its approval gates.

    :param file: the workflow file (absolute).
    :param cwd: the directory the run started from (built-in tools' working directory, ``--tools``
        imports); ``resume`` runs from it again.
    :param state: the ``--state`` overrides, typed.
    :param tools: the ``--tools MODULE[:ATTR]`` specs.
    """

    file: str
    cwd: str
    state: dict[str, JsonValue] = field(default_factory=dict)
    provider: str | None = None
    model: str | None = None
    budget: float | None = None
    stream: bool = False
    mock_responses: str | None = None
    record: str | None = None
    record_tools: bool = False
    tools: tuple[str, ...] = ()

    def to_record(self) -> dict[str, JsonValue]:
        """JSON data for the home's run history, without the ``--state`` values.

        They may hold secrets (a ``redact: true`` key); the DAG run's conf keeps them, as Airflow
        keeps every run's conf, and ``resume`` reads them from there.
        """
        data = dataclasses.asdict(self)
        data["tools"] = list(self.tools)
        del data["state"]
        return data

    @classmethod
    def from_record(cls, data: dict[str, Any]) -> RunOptions:
        """Read back :meth:`to_record`'s data (unknown keys are ignored)."""
        names = {f.name for f in dataclasses.fields(cls)}
        values = {key: value for key, value in data.items() if key in names}
        values["tools"] = tuple(values.get("tools") or ())
        values["state"] = dict(values.get("state") or {})
        return cls(**values)
