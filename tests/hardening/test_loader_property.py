"""Property: whatever YAML lands in the dags folder, the loader gives a DAG or one placeholder, never more.

Hypothesis feeds the loader generated files: valid workflows (ours and the upstream corpus) mutated
structurally (random keys, values and types: dates, NaN, huge integers, bytes, sets, non-string
keys), text surgery on valid files (anchors, aliases, tags, merge keys, odd scalars, broken
indentation), alias bombs and deep nesting, and raw text and bytes. For every input:

- the valid neighbour is still a DAG and the file gives exactly one DAG, real or placeholder;
- a placeholder names the file, and ``agentloom validate``'s function refuses it with the same
  message; a real DAG is what ``validate`` builds, and it serialises as the dag-processor needs;
- nothing escapes, nothing is contained as an *unexpected* error (every refusal is a designed
  message), and no example outlives its deadline.

``AGENTLOOM_HYPOTHESIS_PROFILE`` picks the run: ``ci`` (default, 600 examples, held to the suite's
8-minute budget) or ``long`` (20,000; see docs/development.md).
"""

from __future__ import annotations

import atexit
import copy
import logging
import os
import shutil
import tempfile
from collections.abc import Iterator
from datetime import UTC, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from hypothesis.configuration import set_hypothesis_home_dir
from loader_support import GOOD_DAG, dags_folder, laughs
from shared_paths import EXAMPLES

from airflow_provider_agentloom.dag import loader
from airflow_provider_agentloom.dag.from_file import BuiltWorkflow, load_and_build
from airflow_provider_agentloom.exceptions import WorkflowValidationError

# Hypothesis caches what it learns from our source under a home of its own: a temporary folder
# (removed at exit), not ``.hypothesis`` in the directory the tests run from.
_HYPOTHESIS_HOME = Path(tempfile.mkdtemp(prefix="agentloom-hypothesis-"))
set_hypothesis_home_dir(_HYPOTHESIS_HOME)
atexit.register(shutil.rmtree, _HYPOTHESIS_HOME, True)

settings.register_profile(
    "ci",
    max_examples=600,
    deadline=timedelta(seconds=10),  # "never a hang": a parse is bounded far below this
    database=None,  # tests write only under tmp_path
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much],
)
settings.register_profile("long", settings.get_profile("ci"), max_examples=20_000)
PROFILE_NAME = os.environ.get("AGENTLOOM_HYPOTHESIS_PROFILE", "ci")
PROFILE = settings.get_profile(PROFILE_NAME)

OURS: list[dict[str, Any]] = [
    {
        "name": "base-tools",
        "description": "two tool steps",
        "config": {"max_concurrent_steps": 2, "airflow": {"tags": ["x"], "schedule": "@daily"}},
        "state": {"who": "world", "count": 2, "items": ["a", "b"], "since": "2026-01-01"},
        "steps": [
            {
                "id": "one",
                "type": "tool",
                "tool_name": "shell_command",
                "tool_args": {"command": "echo {state.who}"},
            },
            {
                "id": "two",
                "type": "tool",
                "tool_name": "file_write",
                "depends_on": ["one"],
                "timeout": 30,
                "retry": {"max_retries": 2, "backoff_max": 5},
                "tool_args": {"path": "out.txt", "content": "{steps.one.output}"},
                "output": "written",
            },
        ],
    },
    {
        "name": "base-llm",
        "config": {"provider": "mock", "budget_usd": 1.0, "airflow": {"dag_id": "base_llm", "owner": "team"}},
        "state": {"topic": "owls"},
        "steps": [
            {"id": "ask", "type": "llm_call", "prompt": "Tell me about {state.topic}", "max_tokens": 50},
            {
                "id": "act",
                "type": "agent",
                "prompt": "Use tools",
                "tools": ["shell_command"],
                "depends_on": ["ask"],
            },
        ],
    },
]


def _corpus() -> list[dict[str, Any]]:
    if not EXAMPLES.is_dir():
        return []
    docs = []
    for path in sorted(EXAMPLES.glob("*.yaml")):
        try:
            data = yaml.safe_load(path.read_text())
        except yaml.YAMLError:
            continue
        if isinstance(data, dict):
            docs.append(data)
    return docs


DUMPER = getattr(yaml, "CSafeDumper", yaml.SafeDumper)
BASES = OURS + _corpus()
BASE_TEXTS = [yaml.dump(doc, Dumper=DUMPER, sort_keys=False) for doc in BASES]

KEYS = [
    "name", "steps", "state", "config", "id", "type", "depends_on", "timeout", "retry", "max_retries",
    "backoff_max", "backoff_base", "tool_name", "tool_args", "output", "prompt", "airflow", "dag_id",
    "schedule", "tags", "start_date", "owner", "pool", "max_active_runs", "dagrun_timeout", "sandbox",
    "workflow_path", "workflow_inline", "conditions", "expression", "target", "tools", "stream",
]  # fmt: skip
ODD_STRINGS = [
    "", " ", "..", ".", "a b", "a_b", "@hourlyy", "@daily", "@continuous", "every tuesday", "0 0 30 2 *",
    "* * * * *", "{state.x[" + "9" * 50 + "]}", "{state.", "state.who", "\U0001f680", "ünï", "x" * 120,
    "tool", "router", "subworkflow", "approval_gate", "llm_call", "agent", "/dev/zero", "good-flow",
    "agentloom_invalid__h0.yaml", "1e300", "-1", "0", "NaN", "2026-02-30", "../../etc/passwd",
]  # fmt: skip
SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(10**6), max_value=10**6),
    st.integers(min_value=-(10**40), max_value=10**40),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=30),
    st.sampled_from(ODD_STRINGS),
    st.dates(),
    st.datetimes(timezones=st.sampled_from([None, UTC])),
    st.binary(max_size=6),
)
KEY_VALUES = st.one_of(st.sampled_from(KEYS), st.text(max_size=8), st.integers(-3, 3), st.dates())
VALUES = st.recursive(
    SCALARS | st.sets(st.integers(0, 5), max_size=3),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(KEY_VALUES, inner, max_size=4),
    max_leaves=12,
)
ODD_LINES = [
    "anchor: &a {x: [1, 2]}",
    "alias: *a",
    "loop: &l [*l]",
    "merged: {<<: *a, y: 2}",
    "<<: {name: merged}",
    "tagged: !!python/object:os.system x",
    "binary: !!binary aGVsbG8=",
    "set: !!set {a, b}",
    "date: 2026-01-01",
    "bad_date: 2026-02-30",
    "when: 2026-01-01T10:00:00+02:00",
    "inf: .inf",
    "nan: .nan",
    "big: " + "9" * 5000,
    "---",
    "...",
    "%YAML 1.1",
    "\tname: tab",
    "  - broken: [",
    "name: [a, b]",
    "name: ~",
    "steps: {}",
    "state: !!str 5",
    "? [complex, key]\n: value",
    "'\\x00': nul",
    "\ufeffname: bom",
    "key: \x85next-line",
]


@st.composite
def mutated_documents(draw: st.DrawFn) -> str:
    """A valid workflow with a few keys set, removed or added, dumped back to YAML."""
    doc: Any = copy.deepcopy(draw(st.sampled_from(BASES)))
    for _ in range(draw(st.integers(1, 4))):
        places = list(_places(doc))
        container, key = draw(st.sampled_from(places))
        action = draw(st.sampled_from(["set", "set", "delete", "add"]))
        if action == "delete" and key is not None:
            del container[key]
        elif action == "add" and isinstance(container, dict):
            container[draw(KEY_VALUES)] = draw(VALUES)
        elif action == "add" and isinstance(container, list):
            container.append(draw(VALUES))
        elif key is not None:
            container[key] = draw(VALUES)
    return yaml.dump(doc, Dumper=DUMPER, sort_keys=draw(st.booleans()), allow_unicode=draw(st.booleans()))


def _places(node: Any) -> Iterator[tuple[Any, Any]]:
    """Every (container, key) of a document, and (container, None) for each container itself."""
    if isinstance(node, dict):
        yield node, None
        for key, value in list(node.items()):
            yield node, key
            yield from _places(value)
    elif isinstance(node, list):
        yield node, None
        for index, value in enumerate(node):
            yield node, index
            yield from _places(value)


@st.composite
def text_surgery(draw: st.DrawFn) -> str:
    """A valid workflow's text with odd lines inserted or lines replaced, removed or re-indented."""
    lines = draw(st.sampled_from(BASE_TEXTS)).splitlines()
    for _ in range(draw(st.integers(1, 3))):
        at = draw(st.integers(0, len(lines)))
        odd = draw(st.sampled_from(ODD_LINES) | st.text(max_size=20))
        indent = " " * draw(st.sampled_from([0, 2, 4, 6, 1]))
        action = draw(st.sampled_from(["insert", "replace", "delete"]))
        if action == "insert" or at == len(lines):
            lines.insert(at, indent + odd)
        elif action == "replace":
            lines[at] = indent + odd
        else:
            del lines[at]
    return "\n".join(lines) + "\n"


@st.composite
def alias_bombs(draw: st.DrawFn) -> str:
    levels, fanout = draw(st.integers(1, 10)), draw(st.integers(1, 10))
    lines = ["name: bomb", "state:", f"  l0: &l0 [{', '.join(['lol'] * fanout)}]"]
    for level in range(1, levels):
        lines.append(f"  l{level}: &l{level} [{', '.join([f'*l{level - 1}'] * fanout)}]")
    if draw(st.booleans()):
        lines.append(f"  self: &s {{me: *s, at: *l{levels - 1}}}")
    lines += ["steps:", "  - {id: a, type: tool, tool_name: shell_command}"]
    return "\n".join(lines) + "\n"


@st.composite
def deep_nesting(draw: st.DrawFn) -> str:
    depth = draw(st.integers(0, 150))
    opener, closer = draw(st.sampled_from([("[", "]"), ("{a: ", "}")]))
    return f"name: deep\nstate: {{x: {opener * depth}1{closer * depth}}}\nsteps:\n  - {{id: a, type: tool}}\n"


INPUTS = st.one_of(
    mutated_documents(),
    mutated_documents(),
    text_surgery(),
    alias_bombs(),
    deep_nesting(),
    st.just(laughs()),
    st.text(max_size=200).map(lambda text: "name: raw\n" + text),
    st.text(max_size=300),
    st.binary(max_size=200),
)


class _Unexpected(logging.Handler):
    """Collects the log lines that mean a failure was contained rather than refused by design."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        text = record.getMessage()
        if text.startswith(
            ("Unexpected error", "The AgentLoom loader failed", "Could not build the placeholder")
        ):
            self.messages.append(text + (f": {record.exc_info[1]!r}" if record.exc_info else ""))


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return dags_folder(tmp_path_factory.mktemp("property"))


@pytest.fixture(scope="module")
def unexpected() -> Iterator[_Unexpected]:
    """Watch the loader's logs (and keep thousands of expected 'does not load' lines out of pytest's)."""
    handler = _Unexpected()
    watched = [logging.getLogger(f"airflow_provider_agentloom.{name}") for name in ("file_dag", "loader")]
    for logger in watched:
        logger.addHandler(handler)
        logger.propagate = False
    yield handler
    for logger in watched:
        logger.removeHandler(handler)
        logger.propagate = True


_counter = iter(range(10**9))


@pytest.mark.timeout(3600 if PROFILE_NAME == "long" else 600)
@PROFILE
@given(content=INPUTS)
def test_any_file_gives_one_dag_or_one_placeholder(
    content: str | bytes, folder: Path, unexpected: _Unexpected
) -> None:
    path = folder / f"h{next(_counter)}.yaml"
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content, encoding="utf-8", errors="surrogatepass")
    try:
        dags = loader.load_workflows({}, folder)
        verdict = load_and_build(path)
    finally:
        path.unlink()
        loader._CACHE.pop(str(path), None)
    assert unexpected.messages == [], unexpected.messages
    assert "invalid" not in dags[GOOD_DAG].tags
    mine = [dag for dag_id, dag in dags.items() if dag_id != GOOD_DAG]
    assert len(mine) == 1, sorted(dags)
    dag = mine[0]
    event("placeholder" if "invalid" in dag.tags else "DAG")  # --hypothesis-show-statistics
    if "invalid" in dag.tags:
        message = dag.task_dict["invalid_workflow"].message
        assert message.startswith(str(path)), message
        assert "please report this" not in message, message
        if "already used by" not in message:  # a folder-level refusal: the file alone is valid
            assert isinstance(verdict, WorkflowValidationError), message
            assert str(verdict) == message
    else:
        assert isinstance(verdict, BuiltWorkflow), verdict
        assert verdict.dag.dag_id == dag.dag_id
        from airflow.serialization.serialized_objects import DagSerialization

        DagSerialization.to_dict(dag)
