"""Upstream's example corpus through ``agentloom run FILE --provider mock --json``, one CLI process each.

The examples whose steps are only ``llm_call``, ``tool`` and ``router`` run offline on the mock
provider: every model call answers from the example's own fixture when it names one, else with the
default reply "Mock response" (which matches no router condition of the corpus: each router takes
its default, and its other children are skipped). Those that need the internet or local media files fail, and each such row says
why and checks that the error names that reason (the URL, the file path), so a failure for any
other reason fails the test.

Every run gets a fresh copy of its example (plus the fixture folder it names) in a temporary
directory it runs from, an Airflow home in a temporary directory, and a network guard loaded in
the CLI process itself (``sitecustomize`` on ``PYTHONPATH``: no DNS look-up and no connection
except to loopback), so the results do not depend on whether the machine is online — and nothing
leaves it. The table's runs go two at a time (see ``TableRuns``); ~8 s each, ~17 s for the ones
that retry.
"""

from __future__ import annotations

import json
import os
import queue
import re
import shutil
import subprocess
import time
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from cli_support import cli_env, run_cli

from airflow_provider_agentloom.llm.fixtures import prompt_hash_of

MOCK_DEFAULT_REPLY = "Mock response"
CORPUS_TOOLS = Path(__file__).resolve().parent / "data" / "corpus_tools"
PROGRESS_LINE = re.compile(r"^  (?:ok|FAILED|TIMEOUT|skipped|paused) +(\S+)  \(", re.MULTILINE)


@dataclass(frozen=True)
class Expect:
    """What ``agentloom run EXAMPLE --provider mock`` does offline, and why.

    For a failing example: the step that fails, its attempts, texts its error must contain (``{work}``
    is the directory the run starts from) and the steps skipped after it.
    """

    status: str
    why: str
    failed_step: str | None = None
    attempts: int = 1
    error_parts: tuple[str, ...] = ()
    skipped: tuple[str, ...] = ()
    missing_files: tuple[str, ...] = ()
    needs_dirs: tuple[str, ...] = ()
    route: tuple[str, str] | None = None  # a router that ran and the target it chose
    # ``--tools`` spec: a module of tests/data/corpus_tools, copied to the run's folder
    tools: str | None = None
    args: tuple[str, ...] = ()  # more ``agentloom run`` arguments (an approval's answer)
    paused_at: str | None = None  # a paused run: the approval gate it waits at
    not_run: tuple[str, ...] = ()  # a paused run: the steps after the gate, which have no result yet


def _routed(why: str, router: str, target: str, skipped: tuple[str, ...]) -> Expect:
    """A router's example: the mock's reply matches no condition, so the default branch runs."""
    return Expect("success", why, skipped=skipped, route=(router, target))


def _no_dns_tool(step: str, url: str, skipped: tuple[str, ...]) -> Expect:
    """An ``http_request`` tool step to a public host: refused offline, retried, its dependents skipped."""
    host = url.split("/")[2]
    shown = url.split("?", 1)[0]  # the error shows the URL without its query
    return Expect(
        "failed",
        f"needs internet: tool step http_request GET {url}",
        failed_step=step,
        attempts=4,
        error_parts=(
            f"Tool 'http_request' failed: ConnectError: GET {shown}:",
            f"DNS look-up of '{host}' refused",
        ),
        skipped=skipped,
    )


def _no_dns(url: str, host: str, step: str, skipped: tuple[str, ...] = ()) -> Expect:
    """An image attachment downloaded from (or checked at) a public host: refused offline, retried."""
    return Expect(
        "failed",
        f"needs internet: image attachment {url}",
        failed_step=step,
        attempts=4,  # reference 4.6: any attachment resolution error is a step error, retried
        error_parts=(
            f"Sandbox violation (attachment): attachment 0 ({url}",
            f"host '{host}' does not resolve",
        ),
        skipped=skipped,
    )


def _missing_media(path: str, step: str, skipped: str) -> Expect:
    return Expect(
        "failed",
        f"needs a local media file that is not in the corpus: {path}",
        failed_step=step,
        attempts=4,
        error_parts=(f"Attachment 0 ({path}): no such file: {path}",),
        skipped=(skipped,),
        missing_files=(path,),
    )


CASES: dict[str, Expect] = {
    "01": Expect("success", "one llm_call"),
    "02": Expect("success", "three chained llm_calls"),
    "04": Expect(
        "failed",
        "needs internet: tool step http_request GET https://httpbin.org/json",
        failed_step="fetch_data",
        attempts=4,  # seed tools page: every error a tool raises is retried
        # The product's text names the tool, the request and the transport error; the host comes from the
        # resolver's own error (here the guard's, offline the system's "Name or service not known").
        error_parts=(
            "Tool 'http_request' failed: ConnectError: GET https://httpbin.org/json:",
            "DNS look-up of 'httpbin.org' refused",
        ),
        skipped=("analyze",),
    ),
    "03": _routed(
        "classify + router with a default", "route", "handle_general", ("handle_billing", "handle_technical")
    ),
    "05": _routed(
        "three parallel checks, aggregate, a three-way router",
        "route",
        "send_to_review",
        ("publish", "auto_reject"),
    ),
    "06": _no_dns_tool(
        "enrich_company",
        "https://jsonplaceholder.typicode.com/users/1",
        ("score_lead", "route", "draft_outreach", "nurture_sequence", "log_and_archive"),
    ),
    "07": _no_dns_tool(
        "fetch_deploys",
        "https://jsonplaceholder.typicode.com/posts?_limit=3",
        (
            "analyze",
            "classify_severity",
            "route",
            "incident_response",
            "create_ticket",
            "add_to_backlog",
        ),
    ),
    "08": Expect("success", "four chained llm_calls"),
    "12": _routed(
        "two shell_command (echo) tools, two llm_calls, a severity router",
        "route",
        "log_silently",
        ("fire_alert", "create_ticket"),
    ),
    "13": Expect("success", "file_write/file_read tools under /tmp/agentloom-demo, two llm_calls"),
    # Their custom tools are registered with --tools, as their Python runners (not in the corpus) do.
    "14": Expect(
        "success",
        "@tool custom tools (--tools example14_tools), two llm_calls, a severity router",
        skipped=("alert_critical", "alert_warning"),
        route=("route", "log_healthy"),
        tools="example14_tools",
    ),
    "15": Expect(
        "success",
        "BaseTool subclasses (--tools example15_tools:TOOLS), four llm_calls, a risk router that "
        "takes retention_playbook on the tool's 'high (58/100)'",
        skipped=("proactive_outreach", "monitor_only"),
        route=("route_risk", "retention_playbook"),
        tools="example15_tools:TOOLS",
    ),
    "16": Expect("success", "three llm_calls (a circuit-breaker demo; meaningless on the mock)"),
    "17": Expect(
        "success",
        "shell/file tools in a sandbox rooted at /tmp/agentloom, one llm_call",
        needs_dirs=("/tmp/agentloom",),  # the example runs `echo` with cwd /tmp/agentloom
    ),
    "19": _no_dns(
        "https://placehold.co/400x300/orange/white.png?", "placehold.co", "describe", ("summarize",)
    ),
    "20": Expect("success", "inline base64 image attachment"),
    # fetch: provider downloads nothing, but the URL gets the same host checks (reference 4.6).
    "21": _no_dns("https://httpbin.org/image/png", "httpbin.org", "describe"),
    "22": _no_dns("https://placehold.co/200x200/blue/white.png?", "placehold.co", "analyze_trusted"),
    "23": _missing_media("/tmp/agentloom/sample.pdf", "extract", "summarize"),
    "24": _missing_media("/tmp/agentloom/recording.wav", "transcribe", "analyze"),
    "25": Expect("success", "config.stream: true"),
    "26": _no_dns(
        "https://www.google.com/images/branding/googlelogo/2x/googlelogo_color_272x92dp.png",
        "www.google.com",
        "describe",
    ),
    "27": Expect("success", "array index in a template"),
    "28": Expect("success", "two chained llm_calls"),
    # A gate with no answer pauses the run (exit 0), as upstream's CLI does; an answer given in
    # advance (--approve/--reject) lets it finish, and a rejection is data: the next step runs.
    "29": Expect(
        "paused",
        "an approval gate between two llm_calls, no answer given: paused at the gate",
        paused_at="approve",
        not_run=("finalise",),
    ),
    "30": Expect(
        "success",
        "an approval gate answered --reject in advance; its notify webhook to localhost is refused "
        "(internal address, allow_internal_webhook_targets unset) and never fails the gate",
        args=("--reject", "approve"),
    ),
    "31": Expect("success", "two chained llm_calls (the --record target)"),
    "32": Expect(
        "failed",
        "its responses_file recordings/byzantine.json is not in the corpus: a named fixture that is "
        "missing is an error, never a silent default reply",
        failed_step="explain",
        attempts=1,  # a configuration error: not retried
        error_parts=(
            "Mock responses file 'recordings/byzantine.json' not found",
            "(tried: {work}/recordings/byzantine.json)",
        ),
        skipped=("critique",),
    ),
    "35": Expect("success", "llm_call with a model tool call, on its committed fixture"),
}

# Examples whose steps are only llm_call, tool and router but that are left out of the table above.
EXCLUDED = {
    "18": "tool steps only, refused by the sandbox by design; each refusal's reason is checked by "
    "tests/test_tool_wiring.py and tests/tools/test_example_18.py",
}


@dataclass
class ExampleRun:
    proc: subprocess.CompletedProcess[str]
    workflow: dict[str, Any]
    work: Path
    home: Path
    seconds: float
    example_id: str = ""

    @property
    def document(self) -> dict[str, Any]:
        try:
            document: dict[str, Any] = json.loads(self.proc.stdout)
        except ValueError:
            pytest.fail(
                f"no JSON document on stdout (exit {self.proc.returncode}):\n{self.proc.stderr[-4000:]}"
            )
        return document


def example_file(examples_dir: Path, example_id: str) -> Path:
    (found,) = sorted(examples_dir.glob(f"{example_id}_*.yaml"))
    return found


def run_example(examples_dir: Path, example_id: str, tmp_path: Path, home: Path, *extra: str) -> ExampleRun:
    """Copy the example (and the fixture folder it names) to ``tmp_path/work`` and run it from there."""
    source = example_file(examples_dir, example_id)
    workflow = yaml.safe_load(source.read_text(encoding="utf-8"))
    work = tmp_path / "work"
    work.mkdir(parents=True)
    shutil.copy2(source, work / source.name)
    fixture = (workflow.get("config") or {}).get("responses_file")
    if fixture:
        folder = Path(fixture).parts[0]
        if (examples_dir / folder).is_dir():
            shutil.copytree(examples_dir / folder, work / folder)
    tools = CASES[example_id].tools if example_id in CASES else None
    if tools:
        shutil.copy2(CORPUS_TOOLS / f"{tools.partition(':')[0]}.py", work)
        extra = ("--tools", tools, *extra)
    if example_id in CASES:
        extra = (*CASES[example_id].args, *extra)
    env = cli_env(home)
    started = time.monotonic()
    proc = run_cli("run", source.name, "--provider", "mock", "--json", *extra, cwd=work, env=env)
    return ExampleRun(proc, workflow, work, home, time.monotonic() - started, example_id)


class TableRuns:
    """The CLI runs of the table's selected rows, started together on first use, two at a time.

    Several examples wait seconds between retries (upstream's back-off), so two runs overlap. Each
    worker has its own Airflow home (SQLite is never shared by two runs at once); each run its own
    directory.
    """

    WORKERS = 2

    def __init__(self, base: Path, selected: list[str]) -> None:
        self.base = base
        self.selected = selected
        self.homes: queue.Queue[Path] = queue.Queue()
        for index in range(self.WORKERS):
            self.homes.put(base / f"home-{index}")
        self.pool: ThreadPoolExecutor | None = None
        self.futures: dict[str, Future[ExampleRun]] = {}

    def get(self, examples_dir: Path, example_id: str) -> ExampleRun:
        if self.pool is None:
            self.pool = ThreadPoolExecutor(self.WORKERS, thread_name_prefix="example-run")
            for key in self.selected:
                self.futures[key] = self.pool.submit(self._run, examples_dir, key)
        return self.futures[example_id].result()

    def _run(self, examples_dir: Path, example_id: str) -> ExampleRun:
        for folder in CASES[example_id].needs_dirs:
            Path(folder).mkdir(parents=True, exist_ok=True)
        home = self.homes.get()
        try:
            return run_example(examples_dir, example_id, self.base / f"example-{example_id}", home)
        finally:
            self.homes.put(home)

    def close(self) -> None:
        if self.pool is not None:
            self.pool.shutdown(wait=True, cancel_futures=True)


@pytest.fixture(scope="module")
def table_runs(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[TableRuns]:
    selected = [
        str(item.callspec.params["example_id"])
        for item in request.session.items
        if isinstance(item, pytest.Function) and item.originalname == "test_example_runs_on_the_mock_provider"
    ]
    runs = TableRuns(tmp_path_factory.mktemp("examples"), selected)
    yield runs
    runs.close()


def test_the_table_covers_every_llm_call_tool_and_router_only_example(examples_dir: Path) -> None:
    only_llm_and_tools = set()
    for path in examples_dir.glob("*.yaml"):
        steps = yaml.safe_load(path.read_text(encoding="utf-8"))["steps"]
        if {step["type"] for step in steps} <= {"llm_call", "tool", "router", "approval_gate"}:
            only_llm_and_tools.add(path.name.split("_", 1)[0])
    assert only_llm_and_tools == set(CASES) | set(EXCLUDED)
    assert not set(CASES) & set(EXCLUDED)


@pytest.mark.timeout(300)
@pytest.mark.parametrize(
    ("example_id", "expect"),
    [pytest.param(key, value, id=f"{key}-{value.status}") for key, value in CASES.items()],
)
def test_example_runs_on_the_mock_provider(
    examples_dir: Path, table_runs: TableRuns, example_id: str, expect: Expect
) -> None:
    for path in expect.missing_files:
        assert not Path(path).exists(), f"{path} exists on this machine: example {example_id} would not fail"
    run = table_runs.get(examples_dir, example_id)
    print(f"example {example_id}: exit {run.proc.returncode} in {run.seconds:.1f} s")
    document = run.document
    steps = document["step_results"]
    assert document["status"] == expect.status, (expect.why, document["error"], run.proc.stderr[-3000:])
    assert set(steps) == {step["id"] for step in run.workflow["steps"]} - set(expect.not_run)
    check_progress_order(run)
    if expect.status == "paused":
        assert run.proc.returncode == 0
        assert steps[expect.paused_at]["status"] == "paused"
        assert document["error"] == f"Pause requested at step {expect.paused_at!r}"
        assert f"agentloom resume {document['run_id']} --approve {expect.paused_at}" in run.proc.stderr
        assert all(r["status"] == "success" for sid, r in steps.items() if sid != expect.paused_at)
        return
    if expect.status == "success":
        assert run.proc.returncode == 0
        check_success(run, expect)
        return
    assert run.proc.returncode == 1
    assert expect.failed_step is not None
    failed = steps[expect.failed_step]
    assert failed["status"] == "failed"
    assert failed["attempts"] == expect.attempts
    for part in expect.error_parts:
        assert part.format(work=run.work.resolve()) in failed["error"], (expect.why, failed["error"])
    assert document["error"] == failed["error"]  # upstream's text: the first failed step's error, verbatim
    for step_id in expect.skipped:
        assert steps[step_id]["status"] == "skipped"
        assert steps[step_id]["attempts"] == 0
    others = set(steps) - {expect.failed_step, *expect.skipped}
    assert all(steps[step_id]["status"] == "success" for step_id in others)


def check_progress_order(run: ExampleRun) -> None:
    """The progress lines (stderr) name every step once, never a step before one it depends on."""
    names = {step["id"] for step in run.workflow["steps"]} - set(
        CASES[run.example_id].not_run if run.example_id in CASES else ()
    )
    order = PROGRESS_LINE.findall(run.proc.stderr)
    assert sorted(order) == sorted(names), run.proc.stderr[-3000:]
    for step in run.workflow["steps"]:
        if step["id"] not in names:
            continue
        for parent in step.get("depends_on") or []:
            assert order.index(parent) < order.index(step["id"]), (parent, step["id"], order)


def check_success(run: ExampleRun, expect: Expect) -> None:
    """Every step succeeded at once, but a router's skipped branches; outputs reached the state; model
    steps answered as the mock does."""
    document = run.document
    has_fixture = bool((run.workflow.get("config") or {}).get("responses_file"))
    if expect.route is not None:
        router, target = expect.route
        assert document["step_results"][router]["output"] == target
        assert document["final_state"]["steps"][router] == {"output": target, "status": "success"}
    for step in run.workflow["steps"]:
        result = document["step_results"][step["id"]]
        if step["id"] in expect.skipped:  # not chosen by a router: skipped, with no error (upstream)
            assert (result["status"], result["error"], result["attempts"]) == ("skipped", None, 0)
            assert step["id"] not in document["final_state"]["steps"]
            continue
        assert result["status"] == "success", (step["id"], result["error"])
        assert result["attempts"] == 1
        if step.get("output"):
            assert document["final_state"][step["output"]] == result["output"]
        if step["type"] == "approval_gate":
            answer = "rejected" if "--reject" in expect.args else "approved"
            assert result["output"] == answer
        if step["type"] == "llm_call" and not has_fixture:
            assert result["output"] == MOCK_DEFAULT_REPLY
            assert result["provider"] == "mock"


@pytest.mark.timeout(300)
def test_example_35_replays_its_fixture_and_its_tool_error_goes_back_to_the_model(
    examples_dir: Path, tmp_path: Path
) -> None:
    """Example 35 on its committed fixture ``recordings/tool_calling.json`` (keyed by the step id ``ask``).

    Turn 1 of the fixture asks for ``http_request`` GET https://httpbin.org/get; the call is really
    dispatched to the built-in tool under the example's sandbox (``allowed_domains: [httpbin.org]``),
    whose DNS check fails offline. Seed tools page, "A step or the model": a model tool call's error
    "goes back to the model as the tool's result; the step goes on" — so turn 2 is asked with that
    error as the tool message, and its text is the step's output.
    """
    fixture = json.loads((examples_dir / "recordings" / "tool_calling.json").read_text(encoding="utf-8"))
    first, second = fixture["ask"]
    (asked,) = first["tool_calls"]
    assert asked["name"] == "http_request"
    assert asked["arguments"]["url"] == "https://httpbin.org/get"

    home = Path(os.environ["AGENTLOOM_HOME"])  # the session's home, already migrated
    run = run_example(examples_dir, "35", tmp_path, home, "--record", "rec.json", "--record-tools")
    assert run.proc.returncode == 0, run.proc.stderr[-3000:]
    document = run.document
    assert document["status"] == "success"
    ask = document["step_results"]["ask"]
    assert ask["status"] == "success"
    assert ask["attempts"] == 1  # the tool error did not fail the step

    # The step-id entry matched: the output is the fixture's turn 2, not the mock's default reply.
    assert ask["output"] == second["content"]
    assert ask["output"] != MOCK_DEFAULT_REPLY
    assert document["final_state"]["answer"] == second["content"]
    # Both turns were played: usage and cost are the sums of the fixture's two entries.
    for key in ("prompt_tokens", "completion_tokens", "total_tokens"):
        assert ask["token_usage"][key] == first["usage"][key] + second["usage"][key]
    assert ask["cost_usd"] == pytest.approx(first["cost_usd"] + second["cost_usd"])

    # The recording (--record-tools) holds the tool call's outcome under the reply that asked for it.
    recording = json.loads((run.work / "rec.json").read_text(encoding="utf-8"))
    turn1, turn2 = recording["ask"]
    assert turn1["tool_calls"] == first["tool_calls"]
    outcome = turn1["tool_results"][asked["id"]]
    assert outcome["name"] == "http_request"
    assert outcome["result"] is None
    error = outcome["error"]
    assert error.startswith("Error: Sandbox violation (http_request): host 'httpbin.org' does not resolve")
    assert turn2["content"] == second["content"]

    # Turn 2 was asked with that error as the tool's result: the recorder keys each reply by the
    # prompt hash of its request (upstream's canonical form), and this is the hash of
    # [user question, assistant tool call, tool message = the error].
    question = run.workflow["state"]["question"]
    messages = [
        {"role": "user", "content": question},
        {"role": "assistant", "content": "", "tool_calls": [asked]},
        {"role": "tool", "content": error, "tool_call_id": asked["id"]},
    ]
    turn2_hash = prompt_hash_of(messages, run.workflow["config"]["model"], None, None, None)
    assert recording[turn2_hash]["content"] == second["content"]

    # The task log says the same: the mock read the copied fixture, the tool call failed, one attempt.
    logs = home / "logs"
    (log_file,) = logs.glob(f"dag_id=*/run_id={document['run_id']}/task_id=ask/attempt=*.log")
    assert log_file.name == "attempt=1.log"
    events = [json.loads(line).get("event", "") for line in log_file.read_text().splitlines() if line]
    fixture_path = run.work.resolve() / "recordings" / "tool_calling.json"
    assert f"LLM provider: mock (fixture {fixture_path})" in events
    (tool_line,) = [event for event in events if event.startswith("Tool call ")]
    assert tool_line.startswith(f"Tool call http_request(method, url) -> error: {error}, ")
    assert tool_line.endswith(" ms")
    usage = ask["token_usage"]
    model_line = (
        f"Model gpt-4o-mini via openai: {usage['prompt_tokens']} prompt + {usage['completion_tokens']}"
    )
    assert any(event.startswith(model_line) for event in events)
