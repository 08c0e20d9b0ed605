"""``agentloom visualize``: the three formats as printed, from one picture, over every step type.

The CLI runs in-process (``run_cli`` with capsys). Neither Mermaid nor Graphviz is needed: the
Mermaid and DOT texts are checked by a strict line grammar and a DOT tokenizer, and their labels
decoded back to the workflow's text; when ``dot`` happens to be installed it parses the output too.
"""

from __future__ import annotations

import html
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
from shared_paths import EXAMPLES, require_shared

from airflow_provider_agentloom.cli import run_cli
from airflow_provider_agentloom.cli.graph_picture import EdgeKind, Shape, picture_of, walk
from airflow_provider_agentloom.workflow.parser import load_workflow

TRICKY = '(state.kind\n == "x\\\\y <b> | #1 & [z]")'  # quotes, a backslash, HTML, #, |, a newline

MAIN = """\
name: viz-demo
state:
  topic: "t"
  kind: ""
steps:
  - id: notes
    type: llm_call
    prompt: "Notes on {state.topic}"
    output: notes
  - id: classify
    type: llm_call
    prompt: "Classify {state.topic}"
    output: kind
  - id: summary
    type: llm_call
    depends_on: [classify]
    prompt: "Summarise {state.notes}"
    output: summary
  - id: route
    type: router
    depends_on: [classify]
    conditions:
      - expression: 'state.kind == "a"'
        target: handle_a
      - expression: |-
          (state.kind
           == "x\\\\y <b> | #1 & [z]")
        target: handle_b
    default: handle_other
  - id: handle_a
    type: llm_call
    depends_on: [route]
    prompt: "A"
  - id: handle_b
    type: llm_call
    depends_on: [route]
    prompt: "B"
  - id: handle_other
    type: llm_call
    depends_on: [route]
    prompt: "other"
  - id: review
    type: approval_gate
    depends_on: [handle_a, handle_b, handle_other]
    output: decision
  - id: nested
    type: subworkflow
    depends_on: [review]
    workflow_path: child/outer.yaml
  - id: report
    type: llm_call
    depends_on: [nested]
    prompt: "Report {state.summary}"
"""

OUTER = """\
name: outer-child
steps:
  - id: prep
    type: llm_call
    prompt: "prep"
  - id: inner
    type: subworkflow
    depends_on: [prep]
    workflow_inline:
      name: inner-child
      steps:
        - id: deep
          type: llm_call
          prompt: "deep"
        - id: deeper
          type: llm_call
          depends_on: [deep]
          prompt: "deeper"
"""

ASCII = """\
layer 0
  [llm_call] classify
  [llm_call] notes
layer 1
  <router> route  <- classify
  [llm_call] summary  <- classify, notes (implicit, reads notes)
layer 2
  [llm_call] handle_a  <- route [if state.kind == "a"]
  [llm_call] handle_b  <- route [if (state.kind\\n == "x\\\\\\\\y <b> | #1 & [z]")]
  [llm_call] handle_other  <- route [default]
layer 3
  {{approval_gate}} review  <- handle_a, handle_b, handle_other
layer 4
  [subworkflow] nested  <- review, notes (implicit, reads the whole state), \
summary (implicit, reads the whole state)
  +-- nested: subworkflow outer-child (child/outer.yaml) ----------
  | layer 0
  |   [llm_call] nested.prep
  | layer 1
  |   [subworkflow] nested.inner  <- nested.prep
  |   +-- inner: subworkflow inner-child (inline) ---------------------
  |   | layer 0
  |   |   [llm_call] nested.inner.deep
  |   | layer 1
  |   |   [llm_call] nested.inner.deeper  <- nested.inner.deep
  |   +----------------------------------------------------------------
  +----------------------------------------------------------------
layer 5
  [llm_call] report  <- nested
"""

# (source, target, kind, label) of every edge, qualified ids: what all three formats must show
EDGES = {
    ("classify", "route", "explicit", None),
    ("classify", "summary", "explicit", None),
    ("notes", "summary", "implicit", "reads notes"),
    ("route", "handle_a", "route", 'state.kind == "a"'),
    ("route", "handle_b", "route", TRICKY),
    ("route", "handle_other", "default", "default"),
    ("handle_a", "review", "explicit", None),
    ("handle_b", "review", "explicit", None),
    ("handle_other", "review", "explicit", None),
    ("review", "nested", "explicit", None),
    ("notes", "nested", "implicit", "reads the whole state"),
    ("summary", "nested", "implicit", "reads the whole state"),
    ("nested", "report", "explicit", None),
    ("nested.prep", "nested.inner", "explicit", None),
    ("nested.inner.deep", "nested.inner.deeper", "explicit", None),
}


@pytest.fixture(scope="module")
def workflow_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("viz")
    (root / "wf" / "child").mkdir(parents=True)
    (root / "elsewhere").mkdir()
    (root / "wf" / "main.yaml").write_text(MAIN)
    (root / "wf" / "child" / "outer.yaml").write_text(OUTER)
    return root / "wf" / "main.yaml"


def visualize(
    capsys: pytest.CaptureFixture[str], file: Path | str, fmt: str | None = None
) -> tuple[int, str, str]:
    args = ["visualize", str(file)] + (["--format", fmt] if fmt else [])
    code = run_cli(args)
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def elsewhere(workflow_file: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Run from a different working directory: ``workflow_path`` resolves from the YAML file."""
    monkeypatch.chdir(workflow_file.parents[1] / "elsewhere")
    return Path("..") / "wf" / "main.yaml"


def test_the_expression_text_is_the_tricky_one(workflow_file: Path) -> None:
    route = next(step for step in load_workflow(workflow_file).steps if step.id == "route")
    assert route.conditions[1].expression == TRICKY  # type: ignore[union-attr]


def test_picture_model(workflow_file: Path) -> None:
    picture = picture_of(load_workflow(workflow_file))
    nodes = {node.id: node for node in walk(picture)}
    assert nodes["route"].shape is Shape.DIAMOND
    assert nodes["review"].shape is Shape.HEXAGON
    assert nodes["nested"].shape is Shape.CLUSTER
    assert nodes["nested.inner"].shape is Shape.CLUSTER
    assert nodes["nested.inner.deeper"].layer == 1
    assert nodes["nested"].layer == 4
    edges = set()
    stack = [picture]
    while stack:
        current = stack.pop()
        edges |= {(e.source, e.target, e.kind.value, e.label) for e in current.edges}
        stack += [node.child for node in current.nodes if node.child is not None]
    assert edges == EDGES
    assert {kind.value for kind in EdgeKind} == {kind for _, _, kind, _ in EDGES}


def test_ascii(capsys: pytest.CaptureFixture[str], elsewhere: Path) -> None:
    assert visualize(capsys, elsewhere) == (0, ASCII, "")
    assert visualize(capsys, elsewhere, "ascii") == (0, ASCII, "")


# -- mermaid ------------------------------------------------------------------------------------

_M_NODE = re.compile(r'(s\d+)(\[|\{\{|\{)"([^"\n]*)"(\]|\}\}|\})')
_M_SUBGRAPH = re.compile(r'subgraph (s\d+) \["([^"\n]*)"\]')
_M_EDGE = re.compile(r'(s\d+) (-->|-\.->)(?:\|"([^"\n]*)"\|)? (s\d+)')
_M_CLOSE = {"[": "]", "{": "}", "{{": "}}"}


def _mermaid_label(text: str) -> str:
    assert "<" not in text.replace("<br/>", ""), text  # HTML only as line breaks
    assert not re.search(r"#(?!\d+;)", text), text  # every # starts an entity
    return html.unescape(re.sub(r"#(\d+);", r"&#\1;", text.replace("<br/>", "\n")))


def parse_mermaid(text: str) -> dict[str, Any]:
    """A strict reading of the flowchart: every line one statement, subgraphs balanced."""
    lines = text.splitlines()
    assert lines[0] == "flowchart TD"
    nodes: dict[str, tuple[str, str, str | None]] = {}  # id -> (shape, label, parent subgraph)
    edges: set[tuple[str, str, bool, str | None]] = set()
    open_subgraphs: list[str] = []
    for line in lines[1:]:
        indent = len(line) - len(line.lstrip())
        assert indent == 4 * (1 + len(open_subgraphs)) - (4 if line.strip() == "end" else 0), line
        body = line.strip()
        parent = open_subgraphs[-1] if open_subgraphs else None
        if match := _M_SUBGRAPH.fullmatch(body):
            nodes[match[1]] = ("subgraph", _mermaid_label(match[2]), parent)
            open_subgraphs.append(match[1])
        elif body == "end":
            open_subgraphs.pop()
        elif match := _M_NODE.fullmatch(body):
            assert _M_CLOSE[match[2]] == match[4], line
            nodes[match[1]] = (match[2], _mermaid_label(match[3]), parent)
        elif match := _M_EDGE.fullmatch(body):
            label = _mermaid_label(match[3]) if match[3] is not None else None
            edges.add((match[1], match[4], match[2] == "-.->", label))
        else:
            raise AssertionError(f"not a Mermaid statement: {line!r}")
    assert not open_subgraphs
    assert all(source in nodes and target in nodes for source, target, _, _ in edges)
    return {"nodes": nodes, "edges": edges}


def test_mermaid(capsys: pytest.CaptureFixture[str], elsewhere: Path) -> None:
    code, out, err = visualize(capsys, elsewhere, "mermaid")
    assert (code, err) == (0, "")
    chart = parse_mermaid(out)
    nodes = chart["nodes"]
    by_step = {label.split("\n")[0].split(":")[0]: sid for sid, (_, label, _) in nodes.items()}
    assert nodes[by_step["route"]][:2] == ("{", "route\nrouter, layer 1")
    assert nodes[by_step["review"]][:2] == ("{{", "review\napproval_gate, layer 3")
    assert nodes[by_step["classify"]][:2] == ("[", "classify\nllm_call, layer 0")
    nested, inner = by_step["nested"], by_step["inner"]
    assert nodes[nested] == (
        "subgraph",
        "nested: subworkflow outer-child (child/outer.yaml)\nlayer 4",
        None,
    )
    assert nodes[inner][0::2] == ("subgraph", nested)
    assert nodes[by_step["prep"]][2] == nested
    assert nodes[by_step["deeper"]][2] == inner
    # qualified ids, as the picture names them
    qualified = {sid: name for name, sid in by_step.items()}
    qualified.update({by_step["prep"]: "nested.prep", inner: "nested.inner"})
    qualified.update({by_step["deep"]: "nested.inner.deep", by_step["deeper"]: "nested.inner.deeper"})
    shown = {(qualified[s], qualified[t], dashed, label) for s, t, dashed, label in chart["edges"]}
    assert shown == {(s, t, kind == "implicit", label) for s, t, kind, label in EDGES}
    assert '|"(state.kind<br/> == #34;x\\\\y #60;b#62; #124; #35;1 #38; [z]#34;)"|' in out


# -- dot ----------------------------------------------------------------------------------------

_DOT_TOKEN = re.compile(r'\s+|"(?:[^"\\]|\\.)*"|[A-Za-z_][A-Za-z0-9_]*|-?\d+(?:\.\d+)?|->|[{}\[\];=,]')


def dot_tokens(text: str) -> list[str]:
    tokens, pos = [], 0
    while pos < len(text):
        match = _DOT_TOKEN.match(text, pos)
        assert match, f"no DOT token at {text[pos : pos + 40]!r}"
        if not match[0].isspace():
            tokens.append(match[0])
        pos = match.end()
    return tokens


def dot_string(token: str) -> str:
    """A quoted DOT string's text, with Graphviz's label escapes (``\\n``, ``\\\\``) decoded."""
    assert re.fullmatch(r'".*"', token, re.DOTALL), token
    out, chars = [], iter(token[1:-1])
    for char in chars:
        if char == "\\":
            following = next(chars)
            out.append("\n" if following == "n" else following)
        else:
            out.append(char)
    return "".join(out)


def parse_dot(text: str) -> dict[str, Any]:
    """Statements of the digraph: node and edge attributes by id, clusters by membership."""
    tokens = dot_tokens(text)
    assert tokens[:3] == ["digraph", tokens[1], "{"]
    assert tokens[-1] == "}"
    nodes: dict[str, dict[str, str]] = {}
    edges: list[tuple[str, str, dict[str, str]]] = []
    clusters: dict[str, str | None] = {}  # cluster -> the cluster around it
    member: dict[str, str | None] = {}
    stack: list[str] = []
    pos = 3

    def attributes() -> dict[str, str]:
        nonlocal pos
        found: dict[str, str] = {}
        if tokens[pos] != "[":
            return found
        pos += 1
        while tokens[pos] != "]":
            key, eq, value = tokens[pos : pos + 3]
            assert eq == "=", tokens[pos : pos + 3]
            found[key] = dot_string(value) if value.startswith('"') else value
            pos += 3
            if tokens[pos] == ",":
                pos += 1
        pos += 1
        return found

    while pos < len(tokens) - 1:
        token = tokens[pos]
        if token == "subgraph":
            name = dot_string(tokens[pos + 1])
            assert name.startswith("cluster_")
            assert tokens[pos + 2] == "{"
            clusters[name] = stack[-1] if stack else None
            stack.append(name)
            pos += 3
        elif token == "}":
            stack.pop()
            pos += 1
        elif token in ("node", "edge"):
            pos += 1
            attributes()
            assert tokens[pos] == ";"
            pos += 1
        elif tokens[pos + 1] == "=":  # a graph attribute
            pos += 3
            assert tokens[pos] == ";"
            pos += 1
        elif tokens[pos + 1] == "->":
            source, target = dot_string(token), dot_string(tokens[pos + 2])
            pos += 3
            edges.append((source, target, attributes()))
            assert tokens[pos] == ";"
            pos += 1
        else:
            node = dot_string(token)
            pos += 1
            nodes[node] = attributes()
            member[node] = stack[-1] if stack else None
            assert tokens[pos] == ";"
            pos += 1
    assert not stack
    assert all(source in nodes and target in nodes for source, target, _ in edges)
    return {"nodes": nodes, "edges": edges, "clusters": clusters, "member": member}


def test_dot(capsys: pytest.CaptureFixture[str], elsewhere: Path) -> None:
    code, out, err = visualize(capsys, elsewhere, "dot")
    assert (code, err) == (0, "")
    graph = parse_dot(out)
    nodes, clusters, member = graph["nodes"], graph["clusters"], graph["member"]
    assert nodes["route"] == {"label": "route\nrouter, layer 1", "shape": "diamond"}
    assert nodes["review"] == {"label": "review\napproval_gate, layer 3", "shape": "hexagon"}
    assert nodes["classify"]["shape"] == "box"
    assert clusters == {"cluster_nested": None, "cluster_nested.inner": "cluster_nested"}
    assert member["nested.prep"] == "cluster_nested"
    assert member["nested.inner.deeper"] == "cluster_nested.inner"
    assert member["report"] is None
    assert "nested" not in nodes  # a subworkflow is its cluster
    shown = set()
    for source, target, attrs in graph["edges"]:
        # an edge to or from a subworkflow is drawn to a node inside and clipped at the cluster
        source = attrs.get("ltail", "cluster_" + source).removeprefix("cluster_")
        target = attrs.get("lhead", "cluster_" + target).removeprefix("cluster_")
        assert (attrs.get("style") == "dashed") == (attrs["class"] == "implicit")
        shown.add((source, target, attrs["class"], attrs.get("label")))
    assert shown == EDGES
    assert '[label="(state.kind\\n == \\"x\\\\\\\\y <b> | #1 & [z]\\")", class=route]' in out
    if shutil.which("dot"):  # not installed on the project machines; used when present
        subprocess.run(["dot", "-Tsvg"], input=out, text=True, capture_output=True, check=True)


def test_every_format_shows_the_same_graph(capsys: pytest.CaptureFixture[str], elsewhere: Path) -> None:
    _, ascii_out, _ = visualize(capsys, elsewhere, "ascii")
    _, mermaid_out, _ = visualize(capsys, elsewhere, "mermaid")
    _, dot_out, _ = visualize(capsys, elsewhere, "dot")
    chart, graph = parse_mermaid(mermaid_out), parse_dot(dot_out)
    steps = sum(1 for line in ascii_out.splitlines() if re.match(r"[ |]*  [\[<{]", line))
    assert steps == len(chart["nodes"]) == len(parse_dot(dot_out)["nodes"]) + 2 == 14
    assert len(chart["edges"]) == len(graph["edges"]) == len(EDGES)


# -- errors and the corpus ------------------------------------------------------------------------


def test_invalid_file_is_reported_as_validate_reports_it(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        "name: bad\nsteps:\n  - id: a\n    type: llm_call\n    prompt: x\n    depends_on: [nope]\n"
    )
    code, out, err = visualize(capsys, bad, "dot")
    assert (code, out) == (1, "")
    assert f"invalid  {bad}\n" in err
    assert "unknown step 'nope'" in err
    assert f"{bad}:6: steps[0].depends_on[0]" in err
    assert run_cli(["validate", str(bad)]) == 1
    assert capsys.readouterr().err == err

    missing = tmp_path / "wf.yaml"
    missing.write_text("name: m\nsteps:\n  - id: s\n    type: subworkflow\n    workflow_path: no.yaml\n")
    code, _, err = visualize(capsys, missing)
    assert code == 1
    assert "workflow_path 'no.yaml' not found" in err
    assert run_cli(["validate", str(missing)]) == 1
    assert capsys.readouterr().err == err


def test_every_corpus_file_renders_in_every_format(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    corpus = sorted(require_shared(EXAMPLES).glob("*.yaml"))
    assert len(corpus) == 33
    monkeypatch.chdir(EXAMPLES)
    for path in corpus:
        outputs = {}
        for fmt in ("ascii", "mermaid", "dot"):
            code, out, err = visualize(capsys, path.name, fmt)
            assert (code, err) == (0, ""), (path.name, fmt, err)
            outputs[fmt] = out
        chart, graph = parse_mermaid(outputs["mermaid"]), parse_dot(outputs["dot"])
        assert len(chart["edges"]) == len(graph["edges"]), path.name
        assert outputs["ascii"].startswith("layer 0\n"), path.name


NON_CHILD = """\
name: nc
steps:
  - id: early
    type: llm_call
    prompt: "x"
    output: kind
  - id: route
    type: router
    depends_on: [early]
    conditions:
      - expression: "state.kind == 'a'"
        target: early
      - expression: "state.kind == 'b'"
        target: later
    default: later
  - id: later
    type: llm_call
    prompt: "y"
  - id: empty
    type: subworkflow
    depends_on: [route]
    workflow_inline: {name: nothing, steps: []}
"""


def test_route_to_a_non_child_a_shared_default_and_an_empty_child(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    (tmp_path / "nc.yaml").write_text(NON_CHILD)
    expected = {
        ("early", "route", "explicit", None),
        ("route", "empty", "explicit", None),
        ("later", "empty", "implicit", "reads the whole state"),
        ("route", "early", "route", "state.kind == 'a'"),  # the target does not depend on it
        ("route", "later", "route", "state.kind == 'b' or default"),
    }
    picture = picture_of(load_workflow(tmp_path / "nc.yaml"))
    assert {(e.source, e.target, e.kind.value, e.label) for e in picture.edges} == expected
    code, out, _ = visualize(capsys, tmp_path / "nc.yaml", "dot")
    graph = parse_dot(out)
    assert code == 0
    assert graph["member"]["empty"] == "cluster_empty"  # a placeholder for the edges to land on
    assert len(graph["edges"]) == len(
        parse_mermaid(visualize(capsys, tmp_path / "nc.yaml", "mermaid")[1])["edges"]
    )
