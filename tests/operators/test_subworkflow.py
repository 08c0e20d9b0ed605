"""Subworkflows through ``dag.test()``: TaskGroups, state rules, nesting, failures, sandbox and budget.

A few module-scoped runs, each asserted many ways; child workflows are YAML files under tmp_path,
named relative to the file that names them, parsed from another working directory.
"""

from __future__ import annotations

import textwrap
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from airflow_support import run_dag_test, task_states, xcom

from airflow_provider_agentloom.dag.build import build_dag
from airflow_provider_agentloom.exceptions import WorkflowValidationError
from airflow_provider_agentloom.llm.gateway import ProviderGateway
from airflow_provider_agentloom.llm.mock import MockProvider
from airflow_provider_agentloom.runner.results import RunResultCollector
from airflow_provider_agentloom.tools import tool
from airflow_provider_agentloom.workflow.parser import load_workflow


@tool
def join(parts: list[Any]) -> str:
    """Join the parts with '+'."""
    return "+".join(str(part) for part in parts)


@tool
def echo(value: Any) -> Any:
    """Return the value."""
    return value


@tool
def explode(why: str) -> str:
    """Always fail."""
    raise RuntimeError(f"exploded: {why}")


TOOLS = [join, echo, explode]
NO_RETRY = "retry: {max_retries: 0}"


def write(folder: Path, name: str, text: str) -> Path:
    path = folder / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text).lstrip())
    return path


def run(
    path: Path, workdir: Path, elsewhere: Path, conf: dict[str, Any] | None = None, **options: Any
) -> dict[str, Any]:
    """Parse ``path`` from another working directory, build its DAG, run it, collect its result."""
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(elsewhere)  # workflow_path resolves from the YAML file, not from here
        workflow = load_workflow(path)
        dag = build_dag(workflow, tools=TOOLS, working_dir=str(workdir), discover_tools=False, **options)
        dag_run = run_dag_test(dag, conf=conf)
    run_context = next(iter(dag.task_dict.values())).run_context.root
    from airflow.utils.session import create_session

    with create_session() as session:
        result = RunResultCollector(run_context, conf).collect(session, dag_run)
    return {"dag": dag, "dag_run": dag_run, "states": task_states(dag_run), "result": result}


def states_of(outcome: dict[str, Any]) -> dict[str, str]:
    return {task_id: state for task_id, (state, _) in outcome["states"].items()}


# -- shared and isolated state, templated input, return_keys, two levels of nesting ---------------

SHAPES = """
name: shapes
state: {greeting: hi, secret_note: kept}
steps:
  - {id: first, type: tool, tool_name: echo, tool_args: {value: one}, output: first}
  - id: shared
    type: subworkflow
    workflow_path: kids/shared.yaml
    depends_on: [first]
    output: shared_out
  - id: iso
    type: subworkflow
    isolated_state: true
    input: {who: "{state.greeting}-there", whole: state.first, literal: "state.first is {state.first}"}
    return_keys: [result, who, not_written]
    depends_on: [first]
    output: iso_out
    workflow_inline:
      name: inline-child
      state: {who: nobody, extra: from-child}
      steps:
        - id: r
          type: tool
          tool_name: join
          tool_args: {parts: ["state.who", "state.extra", "state.whole", "{state.literal}"]}
          output: result
        - {id: sees, type: tool, tool_name: echo, tool_args: {value: "{state.greeting}|{state.first}"}, output: seen}
  - id: outer
    type: subworkflow
    workflow_path: kids/outer.yaml
    output: nested_out
  - id: after
    type: tool
    tool_name: echo
    depends_on: [shared, iso, outer]
    tool_args:
      value:
        echoed: state.shared_out.echoed
        iso: state.iso_out
        inner: state.nested_out.o2
        status: "{state.steps.shared.status}"
    output: after
"""

SHARED_CHILD = """
name: shared-child
state: {ignored: "never seen: a shared child starts from the parent's state"}
steps:
  - {id: a, type: tool, tool_name: join, tool_args: {parts: ["state.greeting", "state.first"]}, output: joined}
  - {id: b, type: tool, tool_name: echo, tool_args: {value: "state.joined"}, depends_on: [a], output: echoed}
  - {id: first, type: tool, tool_name: echo, tool_args: {value: child-first}, output: child_first}
"""

OUTER_CHILD = """
name: outer-child
steps:
  - {id: o1, type: tool, tool_name: echo, tool_args: {value: o1}, output: o1}
  - id: nest
    type: subworkflow
    workflow_path: inner/inner.yaml
    depends_on: [o1]
    isolated_state: true
    input: {seed: "{state.o1}/{state.greeting}"}
    output: nested
  - {id: o2, type: tool, tool_name: echo, tool_args: {value: "state.nested.i1"}, depends_on: [nest], output: o2}
"""

INNER_CHILD = """
name: inner-child
state: {own: inner-own}
steps:
  - {id: i1, type: tool, tool_name: join, tool_args: {parts: ["state.seed", "state.own"]}, output: i1}
"""


@pytest.fixture(scope="module")
def shapes(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("shapes")
    folder, workdir, elsewhere = root / "wf", root / "work", root / "elsewhere"
    workdir.mkdir()
    elsewhere.mkdir()
    write(folder, "kids/shared.yaml", SHARED_CHILD)
    write(folder, "kids/outer.yaml", OUTER_CHILD)
    write(folder, "kids/inner/inner.yaml", INNER_CHILD)
    # A decoy where the current directory would find the child: it must never be read.
    write(elsewhere, "kids/shared.yaml", "name: decoy\nsteps: [{id: x, type: tool, tool_name: explode}]\n")
    return run(write(folder, "shapes.yaml", SHAPES), workdir, elsewhere)


def test_every_child_step_is_a_task_of_the_same_dag_run_in_a_task_group(shapes: dict[str, Any]) -> None:
    assert str(shapes["dag_run"].state) == "success"
    assert states_of(shapes) == {
        task_id: "success"
        for task_id in [
            "first",
            "shared.__start__",
            "shared.a",
            "shared.b",
            "shared.first",
            "shared.__end__",
            "iso.__start__",
            "iso.r",
            "iso.sees",
            "iso.__end__",
            "outer.__start__",
            "outer.o1",
            "outer.nest.__start__",
            "outer.nest.i1",
            "outer.nest.__end__",
            "outer.o2",
            "outer.__end__",
            "after",
        ]
    }
    dag = shapes["dag"]
    groups = dag.task_group.get_task_group_dict()
    assert {"shared", "iso", "outer", "outer.nest"} <= set(groups)
    assert set(groups["outer"].children) == {
        "outer.__start__",
        "outer.o1",
        "outer.nest",
        "outer.o2",
        "outer.__end__",
    }
    assert dag.get_task("outer.nest.i1").task_group.group_id == "outer.nest"
    # Edges: the parent's parents -> __start__ -> child roots; child leaves -> __end__ -> dependents.
    # A shared child reads the whole state: implicit edges from every earlier-layer step, as any reader.
    assert dag.get_task("shared.__start__").upstream_task_ids == {"first", "outer.__end__"}
    assert dag.get_task("shared.a").upstream_task_ids == {"shared.__start__"}
    assert dag.get_task("shared.first").upstream_task_ids == {"shared.__start__"}
    assert dag.get_task("shared.__end__").upstream_task_ids == {
        "shared.__start__",
        "shared.a",
        "shared.b",
        "shared.first",
    }
    assert dag.get_task("after").upstream_task_ids == {"shared.__end__", "iso.__end__", "outer.__end__"}
    assert dag.get_task("outer.nest.__start__").upstream_task_ids == {"outer.o1"}
    scope = dag.get_task("first").run_context
    assert scope.tasks_of("outer") == [
        "outer.__start__",
        "outer.o1",
        "outer.nest.__start__",
        "outer.nest.i1",
        "outer.nest.__end__",
        "outer.o2",
        "outer.__end__",
    ]
    assert (scope.entry_task_id("outer"), scope.task_id("outer")) == ("outer.__start__", "outer.__end__")
    assert scope.child(scope.graph.steps["outer"]).qualified_id("o1") == "outer.o1"
    assert dag.get_task("shared.__start__").is_setup
    assert dag.get_task("shared.__end__").is_teardown


def test_shared_child_starts_from_a_copy_of_the_parent_state(shapes: dict[str, Any]) -> None:
    dag_run = shapes["dag_run"]
    assert xcom(dag_run, "shared.a") == "hi+one"
    out = xcom(dag_run, "shared.__end__")
    assert (out["greeting"], out["first"], out["secret_note"]) == ("hi", "one", "kept")
    assert (out["joined"], out["echoed"]) == ("hi+one", "hi+one")
    assert "ignored" not in out  # the child's own state: is ignored when not isolated, as upstream
    # A child step may share an id with a parent step: its own task and its own steps entry.
    assert out["child_first"] == "child-first"
    assert out["steps"]["a"] == {"output": "hi+one", "status": "success"}
    assert out["steps"]["first"] == {"output": "child-first", "status": "success"}


def test_isolated_child_starts_from_its_state_plus_templated_input(shapes: dict[str, Any]) -> None:
    dag_run = shapes["dag_run"]
    # input: templates render, a whole-value state.x passes the value (ours; upstream copies literally)
    assert xcom(dag_run, "iso.r") == "hi-there+from-child+one+state.first is one"
    # the parent's keys are not there: {state.greeting} renders empty, {state.first} too
    assert xcom(dag_run, "iso.sees") == "|"
    # return_keys: only those keys (a key the child never wrote is left out)
    assert xcom(dag_run, "iso.__end__") == {
        "result": "hi-there+from-child+one+state.first is one",
        "who": "hi-there",
    }


def test_two_levels_of_nesting(shapes: dict[str, Any]) -> None:
    dag_run = shapes["dag_run"]
    assert xcom(dag_run, "outer.nest.i1") == "o1/hi+inner-own"
    assert xcom(dag_run, "outer.nest.__end__")["i1"] == "o1/hi+inner-own"
    assert xcom(dag_run, "outer.o2") == "o1/hi+inner-own"
    outer = xcom(dag_run, "outer.__end__")
    assert outer["nested"] == {
        "own": "inner-own",
        "seed": "o1/hi",
        "i1": "o1/hi+inner-own",
        "steps": outer["nested"]["steps"],
    }
    assert set(outer["steps"]) == {"o1", "nest", "o2"}  # layer 0: "first" had not run


def test_parent_reads_the_subworkflow_output_and_child_writes_stay_inside(shapes: dict[str, Any]) -> None:
    result = shapes["result"]
    assert xcom(shapes["dag_run"], "after") == {
        "echoed": "hi+one",
        "iso": {"result": "hi-there+from-child+one+state.first is one", "who": "hi-there"},
        "inner": "o1/hi+inner-own",
        "status": "success",
    }
    state = result.final_state
    for child_key in ("joined", "echoed", "child_first", "result", "o1", "nested", "i1"):
        assert child_key not in state  # child writes never touch the parent's top-level keys
    assert state["first"] == "one"  # the child's step "first" did not overwrite the parent's
    assert state["iso_out"]["who"] == "hi-there"
    assert set(state["steps"]) == {"first", "shared", "iso", "outer", "after"}


def test_the_run_result_reports_child_steps_with_qualified_ids(shapes: dict[str, Any]) -> None:
    result = shapes["result"]
    assert (result.status, result.error) == ("success", None)
    assert list(result.step_results) == [
        "first",
        "outer.o1",
        "outer.nest.i1",
        "outer.nest",
        "outer.o2",
        "outer",
        "iso.r",
        "iso.sees",
        "iso",
        "shared.a",
        "shared.first",
        "shared.b",
        "shared",
        "after",
    ]
    assert all(r.status == "success" for r in result.step_results.values())
    assert result.step_results["shared.b"].output == "hi+one"
    assert result.step_results["shared"].output["echoed"] == "hi+one"
    meta = xcom(shapes["dag_run"], "shared.__end__", key="agentloom")
    assert (meta["step_type"], meta["status"]) == ("subworkflow", "success")
    assert meta["extra"]["child_steps"] == {
        "shared.a": "success",
        "shared.first": "success",
        "shared.b": "success",
    }


# -- a failing child step under both failure policies, a bad input -----------------------------------

FAILURES = """
name: failures
steps:
  - {id: indep, type: tool, tool_name: echo, tool_args: {value: fine}, output: indep}
  - {id: sub_skip, type: subworkflow, workflow_path: skip.yaml, output: skip_out}
  - {id: after_skip, type: tool, tool_name: echo, tool_args: {value: never}, depends_on: [sub_skip]}
  - {id: sub_cont, type: subworkflow, workflow_path: cont.yaml, output: cont_out}
  - {id: after_cont, type: tool, tool_name: echo, tool_args: {value: never}, depends_on: [sub_cont]}
  - id: bad_input
    type: subworkflow
    isolated_state: true
    input: {value: state.not_there}
    workflow_inline:
      name: never-started
      steps: [{id: x, type: tool, tool_name: echo, tool_args: {value: x}}]
"""

SKIP_CHILD = f"""
name: skip-child
steps:
  - {{id: boom, type: tool, tool_name: explode, tool_args: {{why: skip}}, {NO_RETRY}, output: boom}}
  - {{id: below, type: tool, tool_name: echo, tool_args: {{value: below}}, depends_on: [boom]}}
  - {{id: beside, type: tool, tool_name: echo, tool_args: {{value: beside}}, output: beside}}
"""

CONT_CHILD = f"""
name: cont-child
config: {{on_step_failure: continue}}
steps:
  - {{id: boom, type: tool, tool_name: explode, tool_args: {{why: continue}}, {NO_RETRY}}}
  - id: below
    type: tool
    tool_name: echo
    depends_on: [boom]
    tool_args: {{value: "boom was {{state.steps.boom.status}}"}}
    output: below
"""


@pytest.fixture(scope="module")
def failures(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("failures")
    write(root, "skip.yaml", SKIP_CHILD)
    write(root, "cont.yaml", CONT_CHILD)
    (root / "work").mkdir()
    return run(write(root, "failures.yaml", FAILURES), root / "work", root)


def test_child_skip_downstream_skips_below_the_failure_and_fails_the_subworkflow(
    failures: dict[str, Any],
) -> None:
    states = states_of(failures)
    assert states["sub_skip.__start__"] == "success"
    assert states["sub_skip.boom"] == "failed"
    assert failures["states"]["sub_skip.boom"][1] == 1  # retry: {max_retries: 0}
    assert states["sub_skip.below"] == "upstream_failed"
    assert states["sub_skip.beside"] == "success"  # an independent child branch runs
    assert states["sub_skip.__end__"] == "failed"  # ran (all done), and failed with the child's error
    assert states["after_skip"] == "upstream_failed"  # the parent's policy: skip_downstream
    assert states["indep"] == "success"
    meta = xcom(failures["dag_run"], "sub_skip.__end__", key="agentloom")
    assert meta["status"] == "failed"
    assert meta["error"] == xcom(failures["dag_run"], "sub_skip.boom", key="agentloom")["error"]
    assert "exploded: skip" in meta["error"]
    assert meta["extra"]["child_steps"] == {
        "sub_skip.beside": "success",
        "sub_skip.boom": "failed",
        "sub_skip.below": "skipped",
    }
    assert xcom(failures["dag_run"], "sub_skip.__end__") is None  # a failed step has no output


def test_child_continue_runs_dependents_that_see_the_failure(failures: dict[str, Any]) -> None:
    states = states_of(failures)
    assert states["sub_cont.boom"] == "failed"
    assert states["sub_cont.below"] == "success"  # the child's own policy: continue
    assert xcom(failures["dag_run"], "sub_cont.below") == "boom was failed"
    assert states["sub_cont.__end__"] == "failed"  # not every child step succeeded
    assert states["after_cont"] == "upstream_failed"
    assert "exploded: continue" in xcom(failures["dag_run"], "sub_cont.__end__", key="agentloom")["error"]


def test_a_bad_input_fails_the_start_task_once(failures: dict[str, Any]) -> None:
    states = states_of(failures)
    assert states["bad_input.__start__"] == "failed"
    assert failures["states"]["bad_input.__start__"][1] == 1
    assert states["bad_input.x"] == "upstream_failed"
    assert states["bad_input.__end__"] == "upstream_failed"
    error = failures["result"].step_results["bad_input"].error
    assert error == "argument 'state.not_there' names a key the state does not have"


def test_the_run_fails_with_the_first_failed_steps_error(failures: dict[str, Any]) -> None:
    result = failures["result"]
    assert str(failures["dag_run"].state) == "failed"
    assert result.status == "failed"
    steps = result.step_results
    assert result.error == steps["bad_input"].error  # upstream order: layer, then id
    assert [sid for sid, r in steps.items() if r.status == "failed"] == [
        "bad_input",
        "sub_cont.boom",
        "sub_cont",
        "sub_skip.boom",
        "sub_skip",
    ]
    assert steps["sub_cont"].status == "failed"
    assert steps["sub_cont"].error == steps["sub_cont.boom"].error
    assert steps["sub_skip"].status == "failed"
    assert steps["sub_skip.below"].status == "skipped"
    assert steps["sub_skip.below"].error == "skipped due to upstream failure: sub_skip.boom"
    assert steps["after_skip"].error == "skipped due to upstream failure: sub_skip"
    assert steps["bad_input"].status == "failed"
    assert "bad_input.x" not in steps  # the subworkflow never started: only it is reported
    assert result.final_state["steps"]["sub_skip"] == {"output": None, "status": "failed"}
    assert result.final_state["indep"] == "fine"
    assert "skip_out" not in result.final_state


# -- the spec page's sandbox table, every row through a real run ------------------------------------
#
# parent (disabled)
# ├── row1: child disabled            -> its own block: built-in tools unlimited
# ├── row3: child enabled             -> its own sandbox
# │   ├── row2: grandchild disabled   -> the parent's (row3's)
# │   ├── row4: grandchild enabled    -> what both allow
# │   └── row4_domains: enabled, no domain in common -> no request at all
# └── deny: enabled, no allowed_domains
#     └── deny_child: lists 127.0.0.1 -> runs with deny_internal_hosts: its list can't open it


def read(step_id: str, path: str) -> str:
    return (
        f"  - {{id: {step_id}, type: tool, tool_name: file_read, tool_args: {{path: {path}}}, {NO_RETRY}}}\n"
    )


def shell(step_id: str, command: str) -> str:
    args = f'{{command: "{command}", cwd: both}}'
    return f"  - {{id: {step_id}, type: tool, tool_name: shell_command, tool_args: {args}, {NO_RETRY}}}\n"


def http(step_id: str) -> str:
    return f"  - {{id: {step_id}, type: tool, tool_name: http_request, tool_args: {{url: state.url}}, {NO_RETRY}}}\n"


def child(name: str, sandbox: str, body: str) -> str:
    return f"name: {name}\nconfig:\n  on_step_failure: continue\n  sandbox: {sandbox}\nsteps:\n{body}"


def sub(step_id: str, path: str) -> str:
    return f"  - {{id: {step_id}, type: subworkflow, workflow_path: {path}}}\n"


ROW3_SANDBOX = "{enabled: true, allowed_paths: [both, p_only], allowed_commands: [echo, ls], allowed_domains: ['127.0.0.1']}"
ROW4_SANDBOX = (
    "{enabled: true, allowed_paths: [both, c_only], allowed_commands: [echo, cat], "
    "allowed_domains: ['127.0.0.1', localhost], max_write_bytes: 5}"
)
PICTURE = b"\x89PNG\r\n\x1a\n" + b"\x00" * 16

SANDBOX_FILES = {
    "sandbox.yaml": (
        "name: sandbox-table\nconfig: {on_step_failure: continue}\nstate: {url: ''}\nsteps:\n"
        + sub("row1", "rows/row1.yaml")
        + sub("row3", "rows/row3.yaml")
        + sub("deny", "rows/deny.yaml")
        + "  - id: after\n    type: tool\n    tool_name: echo\n    depends_on: [row1, row3, deny]\n"
        + "    tool_args: {value: '{state.steps.row1.status} {state.steps.row3.status} {state.steps.deny.status}'}\n"
    ),
    "rows/row1.yaml": child(
        "row1",
        "{enabled: false}",
        read("read_any", "other/f.txt") + shell("shell_any", "cat f.txt") + http("http_loopback"),
    ),
    "rows/row3.yaml": child(
        "row3",
        ROW3_SANDBOX,
        read("read_own", "p_only/f.txt")
        + read("read_not_listed", "c_only/f.txt")
        + http("http_listed")
        + sub("row2", "row2.yaml")
        + sub("row4", "row4.yaml")
        + sub("row4_domains", "row4_domains.yaml"),
    ),
    "rows/row2.yaml": child(
        "row2",
        "{enabled: false}",
        read("read_parent_path", "p_only/f.txt")
        + read("read_not_parent", "c_only/f.txt")
        + shell("shell_parent_command", "echo row2")
        + shell("shell_not_parent", "cat f.txt"),
    ),
    "rows/row4.yaml": child(
        "row4",
        ROW4_SANDBOX,
        read("read_both", "both/f.txt")
        + read("read_parent_only", "p_only/f.txt")
        + read("read_child_only", "c_only/f.txt")
        + shell("shell_both", "echo row4")
        + shell("shell_parent_only", "ls")
        + shell("shell_child_only", "cat f.txt")
        + http("http_shared_domain")
        + f"  - {{id: write_small, type: tool, tool_name: file_write, tool_args: {{path: both/out.txt, content: abc}}, {NO_RETRY}}}\n"
        + f"  - {{id: write_big, type: tool, tool_name: file_write, tool_args: {{path: both/big.txt, content: '123456'}}, {NO_RETRY}}}\n"
        + f"  - {{id: attach_both, type: llm_call, prompt: look, attachments: [{{source: both/pic.png}}], {NO_RETRY}}}\n"
        + f"  - {{id: attach_parent_only, type: llm_call, prompt: look, attachments: [{{source: p_only/pic.png}}], {NO_RETRY}}}\n",
    ),
    "rows/row4_domains.yaml": child(
        "row4-domains",
        "{enabled: true, allowed_paths: [both], allowed_domains: [localhost]}",
        http("http_no_common_domain"),
    ),
    "rows/deny.yaml": child(
        "deny", "{enabled: true, allowed_paths: [both]}", sub("deny_child", "deny_child.yaml")
    ),
    "rows/deny_child.yaml": child(
        "deny-child",
        "{enabled: true, allowed_paths: [both], allowed_domains: ['127.0.0.1']}",
        http("http_listed_internal"),
    ),
}


class _Pong(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        body = b"pong"
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        return


@pytest.fixture(scope="module")
def loopback() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Pong)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/ping"
    server.shutdown()
    server.server_close()
    thread.join(5)


@pytest.fixture(scope="module")
def sandbox_run(tmp_path_factory: pytest.TempPathFactory, loopback: str) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("sandbox")
    folder, workdir = root / "wf", root / "work"
    for name, text in SANDBOX_FILES.items():
        write(folder, name, text)
    for place in ("both", "p_only", "c_only", "other"):
        write(workdir, f"{place}/f.txt", place)
        (workdir / place / "pic.png").write_bytes(PICTURE)
    gateway = ProviderGateway()
    gateway.register(MockProvider(responses={}), priority=0)
    outcome = run(
        folder / "sandbox.yaml",
        workdir,
        root,
        conf={"url": loopback},
        run_context_options={"provider_gateway": gateway},
    )
    outcome["workdir"] = workdir
    return outcome


ALLOWED = {
    "row1.read_any": "other",
    "row1.shell_any": None,
    "row1.http_loopback": None,
    "row3.read_own": "p_only",
    "row3.http_listed": None,
    "row3.row2.read_parent_path": "p_only",
    "row3.row2.shell_parent_command": None,
    "row3.row4.read_both": "both",
    "row3.row4.shell_both": None,
    "row3.row4.http_shared_domain": None,
    "row3.row4.write_small": None,
    "row3.row4.attach_both": None,
}
REFUSED = {
    "row3.read_not_listed": "Sandbox violation (file_read)",
    "row3.row2.read_not_parent": "Sandbox violation (file_read)",
    "row3.row2.shell_not_parent": "Sandbox violation (shell_command)",
    "row3.row4.read_parent_only": "Sandbox violation (file_read)",
    "row3.row4.read_child_only": "Sandbox violation (file_read)",
    "row3.row4.shell_parent_only": "Sandbox violation (shell_command)",
    "row3.row4.shell_child_only": "Sandbox violation (shell_command)",
    "row3.row4.write_big": "Sandbox violation (file_write)",
    "row3.row4.attach_parent_only": "Sandbox violation (attachment)",
    "row3.row4_domains.http_no_common_domain": "Sandbox violation (http_request)",
    "deny.deny_child.http_listed_internal": "Sandbox violation (http_request)",
}


@pytest.mark.parametrize("task_id", sorted(ALLOWED))
def test_what_the_combined_sandbox_allows_runs(sandbox_run: dict[str, Any], task_id: str) -> None:
    assert states_of(sandbox_run)[task_id] == "success"
    value = xcom(sandbox_run["dag_run"], task_id)
    expected = ALLOWED[task_id]
    if expected is not None:
        assert value == expected
    elif "write" in task_id:
        assert value["written"] == 3
    elif "attach" in task_id:
        assert isinstance(value, str)  # the mock's reply: the attachment was read
    elif "http" in task_id:
        assert value["status_code"] == 200
        assert value["body"] == "pong"
    else:
        assert value["returncode"] == 0
        assert value["stdout"].strip() in ("both", "row2", "row4")


@pytest.mark.parametrize("task_id", sorted(REFUSED))
def test_what_the_combined_sandbox_refuses_fails(sandbox_run: dict[str, Any], task_id: str) -> None:
    assert sandbox_run["states"][task_id] == ("failed", 1)
    error = xcom(sandbox_run["dag_run"], task_id, key="agentloom")["error"]
    assert REFUSED[task_id] in error


def test_the_sandbox_table_runs_end_to_end(sandbox_run: dict[str, Any]) -> None:
    workdir = sandbox_run["workdir"]
    assert (workdir / "both" / "out.txt").read_text() == "abc"
    assert not (workdir / "both" / "big.txt").exists()  # max_write_bytes: the smaller (5) applies
    states = states_of(sandbox_run)
    assert states["row1.__end__"] == "success"
    for failed in ("row3.row2.__end__", "row3.row4.__end__", "row3.__end__", "deny.__end__"):
        assert states[failed] == "failed"
    # the parent's on_step_failure: continue runs the dependent, which sees each real status
    assert states["after"] == "success"
    assert xcom(sandbox_run["dag_run"], "after") == "success failed failed"
    result = sandbox_run["result"]
    assert result.status == "failed"
    assert result.step_results["row3.row4.write_big"].status == "failed"


# -- a budget spent across parent and child; the child's own model ----------------------------------

BUDGET = """
name: budget-parent
config: {budget_usd: 0.05, model: parent-model}
steps:
  - {id: p1, type: llm_call, prompt: one, output: p1}
  - {id: sub, type: subworkflow, workflow_path: spend.yaml, depends_on: [p1], output: sub_out}
  - {id: p2, type: llm_call, prompt: two, depends_on: [sub], output: p2}
  - {id: sub2, type: subworkflow, workflow_path: overspend.yaml, depends_on: [p2]}
  - {id: p3, type: llm_call, prompt: three, depends_on: [sub2]}
"""

SPEND = """
name: spend
config: {model: child-model, budget_usd: 100}
steps:
  - {id: c1, type: llm_call, prompt: c1, output: c1}
  - {id: c2, type: llm_call, prompt: "after {state.c1}", depends_on: [c1], output: c2}
"""

OVERSPEND = """
name: overspend
steps:
  - {id: d1, type: llm_call, prompt: d1, output: d1}
  - {id: d2, type: llm_call, prompt: d2, depends_on: [d1]}
"""

COSTS = {"p1": 0.01, "c1": 0.01, "c2": 0.01, "p2": 0.01, "d1": 0.02, "d2": 0.01, "p3": 0.01}


@pytest.fixture(scope="module")
def budget(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("budget")
    write(root, "spend.yaml", SPEND)
    write(root, "overspend.yaml", OVERSPEND)
    (root / "work").mkdir()
    responses = {sid: {"content": f"{sid} done", "cost_usd": cost} for sid, cost in COSTS.items()}
    provider = MockProvider(responses=responses)
    gateway = ProviderGateway()
    gateway.register(provider, priority=0)
    outcome = run(
        write(root, "budget.yaml", BUDGET),
        root / "work",
        root,
        run_context_options={"provider_gateway": gateway},
    )
    outcome["provider"] = provider
    return outcome


def test_the_budget_counts_parent_and_child_steps_once_each(budget: dict[str, Any]) -> None:
    states = states_of(budget)
    dag_run = budget["dag_run"]
    # p2 starts after $0.03 (p1, c1, c2): counting the subworkflow's own $0.02 too would stop it
    assert states["p2"] == "success"
    sub_meta = xcom(dag_run, "sub.__end__", key="agentloom")
    assert sub_meta["cost_usd"] == pytest.approx(0.02)  # the child's total
    assert xcom(dag_run, "sub.__end__")["c2"] == "c2 done"
    # d1 starts at $0.04 and spends $0.02: d2 starts at $0.06 and is stopped (not run)
    assert states["sub2.d1"] == "success"
    assert states["sub2.d2"] == "failed"
    d2 = xcom(dag_run, "sub2.d2", key="agentloom")
    assert d2["budget_exceeded"] is True
    assert d2["status"] == "skipped"
    assert d2["error"] == "Budget exceeded: spent $0.0600 of $0.0500 limit"
    assert [call.step_id for call in budget["provider"].calls] == ["p1", "c1", "c2", "p2", "d1"]


def test_a_budget_stop_in_a_child_stops_the_subworkflow_and_the_run(budget: dict[str, Any]) -> None:
    states = states_of(budget)
    assert states["sub2.__end__"] == "failed"
    meta = xcom(budget["dag_run"], "sub2.__end__", key="agentloom")
    assert meta["budget_exceeded"] is True
    assert meta["status"] == "skipped"
    assert meta["cost_usd"] == pytest.approx(0.02)
    assert states["p3"] == "upstream_failed"
    result = budget["result"]
    assert result.status == "budget_exceeded"
    assert result.error == "Budget exceeded: spent $0.0600 of $0.0500 limit"
    steps = result.step_results
    assert steps["sub2.d2"].status == "skipped"
    assert steps["sub2"].status == "skipped"
    assert steps["p3"].status == "skipped"
    assert steps["p3"].error == result.error
    assert result.total_cost_usd == pytest.approx(0.06)  # each step once: not the subworkflows again
    assert steps["sub"].cost_usd == pytest.approx(0.02)


def test_a_childs_model_applies_to_its_own_steps(budget: dict[str, Any]) -> None:
    dag_run = budget["dag_run"]
    assert xcom(dag_run, "p1", key="agentloom")["model"] == "parent-model"
    assert xcom(dag_run, "sub.c1", key="agentloom")["model"] == "child-model"
    assert xcom(dag_run, "sub2.d1", key="agentloom")["model"] == "gpt-4o-mini"  # its own default
    assert budget["result"].step_results["sub.c2"].model == "child-model"


# -- validation: missing files, cycles, reserved ids, every child step checked ----------------------


def issues_of(path: Path, cwd: Path) -> list[str]:
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(cwd)
        with pytest.raises(WorkflowValidationError) as caught:
            build_dag(load_workflow(path), discover_tools=False)
    return [str(issue) for issue in caught.value.issues]


def test_a_missing_child_file_is_an_error_at_its_line(tmp_path: Path) -> None:
    (tmp_path / "run_here").mkdir()
    write(tmp_path / "run_here", "child.yaml", SHARED_CHILD)  # in the cwd: never used
    parent = write(
        tmp_path / "wf",
        "parent.yaml",
        """
        name: p
        steps:
          - {id: a, type: tool, tool_name: echo}
          - id: sub
            type: subworkflow
            workflow_path: child.yaml
        """,
    )
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(tmp_path / "run_here")
        with pytest.raises(WorkflowValidationError) as caught:
            load_workflow(parent)
    issue = caught.value.first
    assert (issue.file, issue.line, issue.key_path) == (str(parent), 6, "steps[1].workflow_path")
    assert (
        f"workflow_path 'child.yaml' not found (looked in {tmp_path / 'wf' / 'child.yaml'})" in issue.message
    )


def test_a_cycle_of_files_is_an_error_at_the_closing_line(tmp_path: Path) -> None:
    first = write(
        tmp_path, "a.yaml", "name: a\nsteps:\n  - {id: to_b, type: subworkflow, workflow_path: sub/b.yaml}\n"
    )
    write(
        tmp_path,
        "sub/b.yaml",
        "name: b\nsteps:\n  - {id: x, type: tool, tool_name: echo}\n  - {id: to_a, type: subworkflow, workflow_path: ../a.yaml}\n",
    )
    with pytest.raises(WorkflowValidationError) as caught:
        load_workflow(first)
    issue = caught.value.first
    assert (issue.file, issue.line, issue.key_path) == (
        str(tmp_path / "sub" / "b.yaml"),
        4,
        "steps[1].workflow_path",
    )
    chain = f"{first} -> {tmp_path / 'sub' / 'b.yaml'} -> {first}"
    assert issue.message == f"workflow_path '../a.yaml' includes itself (a cycle of files: {chain})"


def test_reserved_child_ids_are_refused_at_their_line(tmp_path: Path) -> None:
    write(
        tmp_path,
        "child.yaml",
        "name: c\nsteps:\n  - {id: ok, type: tool, tool_name: echo}\n  - {id: __end__, type: tool, tool_name: echo}\n",
    )
    parent = write(
        tmp_path,
        "parent.yaml",
        """
        name: p
        steps:
          - {id: from_file, type: subworkflow, workflow_path: child.yaml}
          - id: inline
            type: subworkflow
            workflow_inline:
              name: i
              steps:
                - {id: __start__, type: tool, tool_name: echo}
        """,
    )
    issues = issues_of(parent, tmp_path)
    assert issues == [
        f"{tmp_path / 'child.yaml'}:4: steps[1].id: step id '__end__' is reserved in a subworkflow: its "
        "TaskGroup's __start__ and __end__ tasks open and close it; rename the step",
        f"{parent}:9: steps[1].workflow_inline.steps[0].id: step id '__start__' is reserved in a "
        "subworkflow: its TaskGroup's __start__ and __end__ tasks open and close it; rename the step",
    ]


def test_check_supported_checks_every_child_step(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from airflow_provider_agentloom.operators import registry
    from airflow_provider_agentloom.workflow.models import StepType

    write(tmp_path, "kids/child.yaml", "name: c\nsteps:\n  - {id: deep, type: tool, tool_name: echo}\n")
    parent = write(
        tmp_path,
        "parent.yaml",
        """
        name: p
        steps:
          - id: outer
            type: subworkflow
            workflow_inline:
              name: i
              steps:
                - {id: nested, type: subworkflow, workflow_path: kids/child.yaml}
        """,
    )
    build_dag(load_workflow(parent), discover_tools=False)  # a subworkflow of subworkflows is supported
    without_tools = {kind: op for kind, op in registry.OPERATORS.items() if kind != StepType.TOOL}
    monkeypatch.setattr(registry, "OPERATORS", without_tools)
    issues = issues_of(parent, tmp_path)
    assert len(issues) == 1
    assert issues[0].startswith(
        f"{tmp_path / 'kids' / 'child.yaml'}:3: steps[0].type: step 'deep': step type 'tool'"
    )


def test_a_step_id_that_meets_a_child_task_id_is_refused(tmp_path: Path) -> None:
    parent = write(
        tmp_path,
        "parent.yaml",
        """
        name: p
        steps:
          - id: sub
            type: subworkflow
            workflow_inline:
              name: i
              steps: [{id: a, type: tool, tool_name: echo}]
          - {id: sub.a, type: tool, tool_name: echo}
        """,
    )
    assert issues_of(parent, tmp_path) == [
        f"{parent}:8: steps[1].id: step 'sub.a' gets the Airflow id 'sub.a', which step 'a' of "
        "subworkflow 'sub' (line 7) has already: rename one"
    ]


# -- the in-process runner: progress and results ---------------------------------------------------


def test_the_runner_reports_each_child_step_once_in_the_order_they_ended(tmp_path: Path) -> None:
    from airflow_provider_agentloom import run_workflow

    write(tmp_path, "skip.yaml", SKIP_CHILD)
    parent = write(
        tmp_path,
        "parent.yaml",
        """
        name: runner-sub
        steps:
          - {id: sub, type: subworkflow, workflow_path: skip.yaml, output: out}
          - {id: after, type: tool, tool_name: echo, tool_args: {value: x}, depends_on: [sub]}
          - id: bad
            type: subworkflow
            isolated_state: true
            input: {v: state.nope}
            workflow_inline: {name: b, steps: [{id: x, type: tool, tool_name: echo, tool_args: {value: 1}}]}
        """,
    )
    events: list[tuple[str, str, str]] = []
    result = run_workflow(
        parent,
        tools=TOOLS,
        working_dir=tmp_path,
        on_progress=lambda step, event: events.append((step.step_id, str(step.status), event)),
    )
    assert result.status == "failed"
    assert result.error == "argument 'state.nope' names a key the state does not have"
    done = [(sid, status) for sid, status, event in events if event == "done"]
    assert sorted(done) == sorted(
        [
            ("sub.boom", "failed"),
            ("sub.below", "skipped"),
            ("sub.beside", "success"),
            ("sub", "failed"),
            ("after", "skipped"),
            ("bad", "failed"),  # never started: its child step is not reported
        ]
    )
    order = [sid for sid, _ in done]
    assert order.index("sub.boom") < order.index("sub") < order.index("after")
    assert order.index("sub.beside") < order.index("sub")
    assert set(result.step_results) == {sid for sid, _ in done}
    assert result.step_results["after"].error == "skipped due to upstream failure: sub"


def test_a_python_registry_keeps_its_tools_and_a_child_rebuilds_its_builtins(tmp_path: Path) -> None:
    from airflow_provider_agentloom.tools import ToolRegistry
    from airflow_provider_agentloom.tools.builtins import register_builtins

    registry = ToolRegistry([echo])
    register_builtins(registry, base_dir=tmp_path / "work")  # no sandbox at all
    write(tmp_path / "work", "other/f.txt", "other")
    parent = write(
        tmp_path,
        "parent.yaml",
        f"""
        name: given-registry
        config: {{on_step_failure: continue}}
        steps:
          - {{id: read, type: tool, tool_name: file_read, tool_args: {{path: other/f.txt}}, {NO_RETRY}}}
          - id: sub
            type: subworkflow
            workflow_inline:
              name: strict-child
              config: {{on_step_failure: continue, sandbox: {{enabled: true, allowed_paths: [both]}}}}
              steps:
                - {{id: read, type: tool, tool_name: file_read, tool_args: {{path: other/f.txt}}, {NO_RETRY}}}
                - {{id: own_tool, type: tool, tool_name: echo, tool_args: {{value: mine}}}}
        """,
    )
    workflow = load_workflow(parent)
    dag = build_dag(
        workflow, working_dir=str(tmp_path / "work"), run_context_options={"tool_registry": registry}
    )
    dag_run = run_dag_test(dag)
    states = {task_id: state for task_id, (state, _) in task_states(dag_run).items()}
    assert states["read"] == "success"
    assert xcom(dag_run, "read") == "other"
    assert states["sub.read"] == "failed"  # the child's own sandbox applies to the given built-ins
    assert "Sandbox violation (file_read)" in xcom(dag_run, "sub.read", key="agentloom")["error"]
    assert xcom(dag_run, "sub.own_tool") == "mine"  # a tool of your own stays as given


def test_child_tasks_take_their_own_policy_and_pool_else_the_dags(tmp_path: Path) -> None:
    parent = write(
        tmp_path,
        "parent.yaml",
        """
        name: settings
        config: {airflow: {pool: main_pool}, on_step_failure: continue}
        steps:
          - {id: top, type: tool, tool_name: echo}
          - id: plain
            type: subworkflow
            depends_on: [top]
            workflow_inline:
              name: plain
              steps:
                - {id: a, type: tool, tool_name: echo}
                - {id: b, type: tool, tool_name: echo, depends_on: [a], retry: {max_retries: 7}}
          - id: own
            type: subworkflow
            workflow_inline:
              name: own
              config: {airflow: {pool: own_pool}, on_step_failure: continue}
              steps: [{id: a, type: tool, tool_name: echo}, {id: b, type: tool, tool_name: echo, depends_on: [a]}]
        """,
    )
    dag = build_dag(load_workflow(parent), discover_tools=False)
    assert dag.get_task("plain.a").pool == "main_pool"
    assert dag.get_task("own.a").pool == "own_pool"
    # The parent's policy (continue), relaxed: `plain` reads the whole state, which `own` writes (an
    # implicit edge), and a router's skip of `own` must not skip it.
    assert dag.get_task("plain.__start__").trigger_rule == "all_done"
    assert dag.get_task("plain.a").trigger_rule == "all_success"  # after its setup: Airflow's rule
    assert dag.get_task("plain.b").trigger_rule == "all_success"  # the child's: skip_downstream
    assert dag.get_task("own.b").trigger_rule == "none_skipped"  # the child's: continue
    assert dag.get_task("plain.b").retries == 7
    assert (dag.get_task("plain.__start__").retries, dag.get_task("plain.__end__").retries) == (0, 0)
    assert dag.get_task("plain.__end__").trigger_rule == "all_done_setup_success"
