"""Issue 7, section 5: the LLM layer holds against a hostile model endpoint.

Every test talks to a loopback server on 127.0.0.1 that misbehaves on purpose, in each vendor's
wire format where the behaviour is vendor-specific, and proves the effect did not happen: no
undeclared tool ran (its marker file does not exist), no call outlived its deadline, no cut-off
stream or lying usage became a success, the budget held, memory stayed under the cap, no tool
ran past the fan-out limits, no tool ran live in a replay.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest
from airflow_support import run_dag_test, xcom
from hostile_llm_support import (
    KITS,
    MEMORY_SCRIPT,
    Reply,
    VendorKit,
    anthropic_stream,
    cut_off,
    drip,
    huge_replies,
    keepalives_forever,
    lying_usage,
    openai_stream,
)
from llm_loopback import LoopbackServer, SeenRequest

from airflow_provider_agentloom import WorkflowEngine, WorkflowParser
from airflow_provider_agentloom.dag.build import build_dag
from airflow_provider_agentloom.exceptions import LLMHTTPError, StepError
from airflow_provider_agentloom.hooks.gateway import (
    build_gateway,
    provider_from_settings,
    settings_from_connection,
)
from airflow_provider_agentloom.llm.errors import FixtureError, ProviderResponseError, ReplyTooLargeError
from airflow_provider_agentloom.llm.gateway import ProviderGateway
from airflow_provider_agentloom.llm.limits import DEFAULT_MAX_REPLY_BYTES, DEFAULT_REQUEST_TIMEOUT
from airflow_provider_agentloom.llm.loop import run_tool_loop
from airflow_provider_agentloom.llm.mock import MockProvider
from airflow_provider_agentloom.llm.openai import OpenAIProvider
from airflow_provider_agentloom.llm.pricing import PricingTable
from airflow_provider_agentloom.llm.recording import RecordingProvider
from airflow_provider_agentloom.llm.types import ChatRequest, Message, ToolSpec
from airflow_provider_agentloom.operators.budget import BudgetGuard
from airflow_provider_agentloom.operators.services import LLMOptions
from airflow_provider_agentloom.tools import BaseTool, ToolRegistry, tool
from airflow_provider_agentloom.tools.builtins import register_builtins
from airflow_provider_agentloom.tools.invoke import invoke_tool
from airflow_provider_agentloom.tools.sandbox import ToolSandbox

OPENAI = KITS["openai"]


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def server() -> Any:
    srv = LoopbackServer().start()
    yield srv
    srv.stop()


@pytest.fixture(params=sorted(KITS))
def kit(request: pytest.FixtureRequest) -> VendorKit:
    return KITS[request.param]


def ask(kit: VendorKit, *, tools: list[str] | None = None, **kw: Any) -> ChatRequest:
    specs = [ToolSpec(name=name) for name in tools or []]
    return ChatRequest(model=kit.model, messages=[Message.user("go")], tools=specs, **kw)


def openai_gateway(server: LoopbackServer, **kw: Any) -> ProviderGateway:
    gateway = ProviderGateway(max_retries=0)
    gateway.register(OpenAIProvider(OPENAI.key, server.url, **kw), is_fallback=True)
    return gateway


def has_tool_result(request: SeenRequest) -> bool:
    return any(m["role"] == "tool" for m in request.body["messages"])


def run_task(workflow: str, tmp_path: Path, *, tools: tuple[BaseTool, ...] = (), **context: Any) -> Any:
    """Run ``workflow``'s DAG with ``dag.test()``; ``context``: its run-context options (the gateway)."""
    dag = build_dag(
        WorkflowParser.from_yaml(workflow),
        tools=tools,
        working_dir=str(tmp_path),
        discover_tools=False,
        run_context_options=context,
    )
    return run_dag_test(dag)


# -- 1. a model runs only the tools its step declares --------------------------------------------


@pytest.mark.anyio
@pytest.mark.timeout(20)
async def test_an_undeclared_tool_call_goes_back_as_an_error_and_nothing_runs(
    kit: VendorKit, server: LoopbackServer, tmp_path: Path
) -> None:
    marker = tmp_path / "pwned"
    server.handler = lambda r: (
        kit.text("done")
        if kit.tool_results(r)
        else kit.tool_call("c1", "shell_command", {"command": f"touch {marker}"})
    )
    registry = ToolRegistry()
    register_builtins(registry, sandbox=ToolSandbox(base_dir=tmp_path), base_dir=tmp_path)  # sandbox off

    async def execute(name: str, arguments: dict[str, Any]) -> Any:
        return await invoke_tool(registry, name, arguments)

    result = await run_tool_loop(kit.provider(server.url), ask(kit, tools=["file_read"]), execute, 3)

    assert not marker.exists()  # shell_command is registered, but the step never declared it
    expected = "Error: tool 'shell_command' is not available in this step (available: file_read)"
    assert kit.tool_results(server.requests[1]) == [expected]
    assert result.content == "done"
    assert [(r.name, r.error, r.duration_ms) for r in result.tool_calls] == [("shell_command", expected, 0.0)]


AGENT_WORKFLOW = """
name: hostile-undeclared-{case}
config:
  sandbox: {{enabled: true, allowed_commands: [touch], allowed_paths: ["{tmp}"]}}
steps:
  - id: act
    type: agent
    prompt: "Read the note."
    tools: {tools}
    max_iterations: 2
    retry: {{max_retries: 0}}
    output: answer
"""

LLM_CALL_WORKFLOW = """
name: hostile-undeclared-llm-call
steps:
  - id: act
    type: llm_call
    prompt: "Fetch the page."
    tools: [{{name: http_request, description: "Fetch a URL"}}]
    max_tool_iterations: 2
    retry: {{max_retries: 0}}
    output: answer
"""


@pytest.mark.timeout(60)
@pytest.mark.parametrize(
    ("case", "declared"),
    [
        ("agent-sandbox-on", "[file_read]"),
        ("llm-call-sandbox-off", None),
        ("agent-control", "[file_read, shell_command]"),  # declared: it runs, so the test can fail
    ],
)
def test_an_airflow_task_runs_no_tool_its_step_does_not_declare(
    server: LoopbackServer, tmp_path: Path, case: str, declared: str | None
) -> None:
    marker = tmp_path / "pwned"
    server.handler = lambda r: (
        OPENAI.text("done")
        if has_tool_result(r)
        else OPENAI.tool_call("c1", "shell_command", {"command": f"touch {marker}"})
    )
    text = (
        LLM_CALL_WORKFLOW.format()
        if declared is None
        else AGENT_WORKFLOW.format(case=case, tmp=tmp_path, tools=declared)
    )
    dag_run = run_task(text, tmp_path, provider_gateway=openai_gateway(server))

    assert str(dag_run.state) == "success"
    assert xcom(dag_run, "act") == "done"
    (tool_message,) = OPENAI.tool_results(server.requests[1])
    (call,) = xcom(dag_run, "act", key="agentloom")["extra"]["tool_calls"]
    if case == "agent-control":
        assert marker.exists()
        assert call["ok"] is True
        return
    assert not marker.exists()
    assert tool_message.startswith("Error: tool 'shell_command' is not available in this step")
    assert call == {"name": "shell_command", "ok": False, "replayed": False, "duration_ms": 0.0}


# -- 2. an overall deadline per model call, streams included ------------------------------------


def test_the_deadline_defaults_are_documented_values() -> None:
    provider = OpenAIProvider("k", "http://127.0.0.1:1")
    assert (provider.request_timeout, DEFAULT_REQUEST_TIMEOUT) == (600.0, 600.0)
    assert (provider.max_reply_bytes, DEFAULT_MAX_REPLY_BYTES) == (10 * 1024 * 1024,) * 2


@pytest.mark.anyio
@pytest.mark.timeout(20)
async def test_a_stream_of_keep_alives_ends_at_the_deadline(kit: VendorKit, server: LoopbackServer) -> None:
    server.script([keepalives_forever(kit)])
    chunks: list[str] = []
    with pytest.raises(LLMHTTPError) as caught:  # the keep-alives would go on for 8 s
        await kit.provider(server.url, request_timeout=0.5).stream(ask(kit), chunks.append)
    assert "did not finish its reply within the 0.5 s deadline (request_timeout" in str(caught.value)
    assert caught.value.retryable
    assert caught.value.status_code == 0
    assert chunks == []


@pytest.mark.anyio
@pytest.mark.timeout(20)
async def test_a_body_sent_a_byte_at_a_time_ends_at_the_step_deadline(server: LoopbackServer) -> None:
    server.script([drip(OPENAI.text("slow"))])
    provider = OPENAI.provider(server.url, request_timeout=30)
    with pytest.raises(LLMHTTPError, match=r"within the 0\.6 s deadline") as caught:
        # The request's own deadline (the step's request_timeout) wins over the provider's (30 s);
        # the body alone takes ~20 s.
        await provider.complete(ask(OPENAI, request_timeout=0.6))
    assert caught.value.retryable


@pytest.mark.anyio
@pytest.mark.timeout(20)
async def test_the_deadline_comes_from_the_connection_extra_or_the_provider_option(
    server: LoopbackServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    from airflow.sdk import Connection

    def connection(extra: dict[str, Any]) -> Any:
        conn = Connection(
            conn_id="hostile",
            conn_type="agentloom_llm",
            host=server.url,
            password=OPENAI.key,
            extra=json.dumps(extra),
        )
        return provider_from_settings(settings_from_connection(conn, "hostile"))

    monkeypatch.setenv("AIRFLOW__AGENTLOOM__LLM_REQUEST_TIMEOUT", "0.7")
    assert connection({"vendor": "openai"}).request_timeout == 0.7
    provider = connection({"vendor": "openai", "request_timeout": 0.5, "max_reply_bytes": 4096})
    assert (provider.request_timeout, provider.max_reply_bytes) == (0.5, 4096)
    server.script([drip(OPENAI.text("slow"))])
    with pytest.raises(LLMHTTPError, match=r"within the 0\.5 s deadline"):
        await provider.complete(ask(OPENAI))
    with pytest.raises(StepError, match=r"request_timeout of connection 'hostile' must be a positive number"):
        connection({"vendor": "openai", "request_timeout": "-1"})
    with pytest.raises(StepError, match=r"max_reply_bytes of connection 'hostile' must be a whole number"):
        connection({"vendor": "openai", "max_reply_bytes": 1.5})


STEP_DEADLINE = """
name: hostile-deadline
steps:
  - id: slow
    type: llm_call
    prompt: "Answer slowly."
    request_timeout: 0.5
    retry: {max_retries: 0}
"""


@pytest.mark.timeout(60)
def test_a_step_request_timeout_fails_the_airflow_task_with_a_retryable_deadline_error(
    server: LoopbackServer, tmp_path: Path
) -> None:
    server.script([drip(OPENAI.text("slow"))])
    dag_run = run_task(STEP_DEADLINE, tmp_path, provider_gateway=openai_gateway(server))
    assert str(dag_run.state) == "failed"
    meta = xcom(dag_run, "slow", key="agentloom")
    assert meta["status"] == "failed"
    assert "did not finish its reply within the 0.5 s deadline" in meta["error"]
    assert xcom(dag_run, "slow") is None


# -- 3. a cut-off stream is a retryable error, not half an answer -------------------------------


@pytest.mark.anyio
async def test_a_stream_cut_before_its_end_marker_is_a_retryable_error(
    kit: VendorKit, server: LoopbackServer
) -> None:
    server.script([cut_off(kit, ["The answer ", "is forty", "-two."])])
    chunks: list[str] = []
    with pytest.raises(LLMHTTPError, match="stream ended early") as caught:
        await kit.provider(server.url).stream(ask(kit), chunks.append)
    assert caught.value.retryable
    assert caught.value.status_code == 0
    assert chunks  # text did flow before the cut: the call still did not succeed

    server.script([kit.stream(["The answer ", "is forty", "-two."])])  # the same stream, whole
    whole = await kit.provider(server.url).stream(ask(kit))
    assert whole.content == "The answer is forty-two."


# -- 4. usage is refused when it lies --------------------------------------------------------------


@pytest.mark.anyio
@pytest.mark.parametrize(
    "count", [-500_000, 1.5, "12", 10**12], ids=["negative", "fraction", "string", "huge"]
)
async def test_a_reply_with_a_lying_token_count_is_refused(
    kit: VendorKit, server: LoopbackServer, count: Any
) -> None:
    server.script([lying_usage(kit, count)])
    priced = PricingTable.from_mapping({kit.model: {"input": 1.5, "output": 1.5}})
    with pytest.raises(ProviderResponseError, match="not in its documented format") as caught:
        await kit.provider(server.url, pricing=priced).complete(ask(kit))
    assert not caught.value.retryable
    assert repr(count) in str(caught.value) or "integer" in str(caught.value)


@pytest.mark.anyio
async def test_a_streamed_negative_count_is_refused(server: LoopbackServer) -> None:
    stream = KITS["anthropic"].stream(["hi"])
    assert stream.chunks is not None
    stream.chunks = [c.replace('"output_tokens": 7', '"output_tokens": -500000') for c in stream.chunks]
    server.script([stream])
    with pytest.raises(ProviderResponseError, match=r"usage\.output_tokens.*-500000"):
        await KITS["anthropic"].provider(server.url).stream(ask(KITS["anthropic"]))


def test_no_cost_can_go_negative_from_a_recording_or_a_pricing_file(tmp_path: Path) -> None:
    rec = tmp_path / "rec.json"
    rec.write_text(json.dumps({"_version": 2, "s": [{"content": "x", "cost_usd": -0.75}]}))
    with pytest.raises(FixtureError, match=r"'s\[0\]' is malformed \(cost_usd\)"):
        anyio.run(MockProvider(responses_file=rec).complete, ChatRequest(model="m", messages=[], step_id="s"))
    with pytest.raises(ValueError, match="must be finite and not negative"):
        PricingTable.from_mapping({"m": {"input": -1, "output": 0}})


# -- 5. the budget is checked before every model call --------------------------------------------

PRICES = "hostile-priced: {input: 0.01, output: 0.0}\n"  # 1,000 prompt tokens = $0.01


def priced_tool_call(request: SeenRequest) -> Reply:
    """Always ask for one more tool call, at $0.01 a reply: only the budget ends the loop."""
    reply = OPENAI.tool_call(f"c{len(request.body['messages'])}", "noop", {})
    reply.json["usage"] = {"prompt_tokens": 1000, "completion_tokens": 0, "total_tokens": 1000}
    reply.json["model"] = "hostile-priced"
    return reply


@pytest.fixture
def priced(server: LoopbackServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The server answers every request with a tool call costing $0.01 (by a price file of ours)."""
    prices = tmp_path / "prices.yaml"
    prices.write_text(PRICES)
    monkeypatch.setenv("AGENTLOOM_PRICING_FILE", str(prices))
    server.handler = priced_tool_call


@tool(description="Do nothing.")
def noop() -> str:
    return "ok"


@pytest.mark.anyio
@pytest.mark.usefixtures("priced")
async def test_the_budget_stops_a_loop_before_the_model_call_that_would_pass_it(
    server: LoopbackServer,
) -> None:
    published: list[float] = []
    guard = BudgetGuard(
        openai_gateway(server), limit=0.025, spent_elsewhere=lambda: 0.004, publish=published.append
    )

    async def execute(name: str, arguments: dict[str, Any]) -> Any:
        return "ok"

    from airflow_provider_agentloom.exceptions import BudgetExceededError

    request = ChatRequest(
        model="hostile-priced", messages=[Message.user("go")], tools=[ToolSpec(name="noop")]
    )
    with pytest.raises(BudgetExceededError, match=r"Budget exceeded: spent \$0\.0340 of \$0\.0250 limit"):
        await run_tool_loop(guard, request, execute, 50)
    assert server.count == 3  # 0.004 + 3 × 0.01 ≥ 0.025: the fourth call never left
    assert published == pytest.approx([0.01, 0.02, 0.03])


PARALLEL_BUDGET = """
name: hostile-budget
config: {budget_usd: LIMIT, model: hostile-priced, max_concurrent_steps: 5}
steps:
""" + "".join(
    f"  - {{id: s{i}, type: agent, prompt: 'go {i}', tools: [noop], max_iterations: 20, retry: {{max_retries: 0}}}}\n"
    for i in range(1, 6)
)


@pytest.mark.timeout(120)
@pytest.mark.usefixtures("priced")
def test_five_parallel_steps_overshoot_the_budget_by_at_most_one_call_each(
    server: LoopbackServer, tmp_path: Path
) -> None:
    limit, one_call = 0.025, 0.01
    workflow = WorkflowParser.from_yaml(PARALLEL_BUDGET.replace("LIMIT", str(limit)))
    engine = WorkflowEngine(
        workflow=workflow,
        provider_gateway=openai_gateway(server),
        tool_registry=ToolRegistry([noop]),
        working_dir=tmp_path,
    )
    result = anyio.run(engine.run)

    assert result.status == "budget_exceeded"
    assert str(result.error).startswith("Budget exceeded: spent $")
    # Without the per-call check: 5 steps × 21 calls = $1.05.
    assert server.count * one_call == pytest.approx(result.total_cost_usd)
    assert result.total_cost_usd <= limit + 5 * one_call + 1e-9
    for step in result.step_results.values():
        assert (step.status, step.error is not None and step.error.startswith("Budget exceeded:")) == (
            "skipped",
            True,
        )


# -- 6. replies have a size cap --------------------------------------------------------------------


@pytest.mark.anyio
async def test_a_reply_past_the_cap_is_refused_in_every_wire_format(
    kit: VendorKit, server: LoopbackServer
) -> None:
    cap = 64 * 1024
    provider = kit.provider(server.url, max_reply_bytes=cap)
    server.script([kit.text("x" * 100_000)])
    with pytest.raises(ReplyTooLargeError, match="larger than the 64 KiB cap") as caught:
        await provider.complete(ask(kit))
    assert not caught.value.retryable
    server.script([kit.stream(["y" * 1000] * 100)])
    with pytest.raises(ReplyTooLargeError, match="text, reasoning and tool-call arguments together"):
        await provider.stream(ask(kit))
    server.script([Reply(chunks=["data: " + "z" * 100_000], content_type="text/event-stream")])
    with pytest.raises(ReplyTooLargeError, match="one stream line"):
        await provider.stream(ask(kit))


@pytest.mark.anyio
@pytest.mark.parametrize("vendor", ["openai", "anthropic"])
async def test_streamed_text_and_tool_arguments_count_together(vendor: str, server: LoopbackServer) -> None:
    kit = KITS[vendor]
    build = openai_stream if vendor == "openai" else anthropic_stream
    text, arguments = "t" * 40_000, json.dumps({"a": "a" * 40_000})
    server.script([Reply(chunks=build(text, arguments), content_type="text/event-stream")])
    with pytest.raises(ReplyTooLargeError, match="64 KiB cap"):
        await kit.provider(server.url, max_reply_bytes=64 * 1024).stream(ask(kit))
    server.script([Reply(chunks=build(text[:10_000], arguments), content_type="text/event-stream")])
    reply = await kit.provider(server.url, max_reply_bytes=64 * 1024).stream(ask(kit))
    assert (len(reply.content), len(reply.tool_calls[0].arguments["a"])) == (10_000, 40_000)


@pytest.mark.timeout(60)
def test_memory_stays_under_the_cap_while_the_server_streams_120_mb(server: LoopbackServer) -> None:
    cap, total = 8 * 1024 * 1024, 120 * 1024 * 1024
    replies = huge_replies(total)
    server.handler = lambda r: replies[r.body["model"]]
    proc = subprocess.run(
        [sys.executable, "-c", MEMORY_SCRIPT, server.url, str(cap)],
        capture_output=True,
        text=True,
        timeout=50,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads(proc.stdout)
    for name, outcome in report["outcomes"].items():
        assert outcome.startswith("ReplyTooLargeError:"), (name, outcome)
        assert "8 MiB cap" in outcome, (name, outcome)
    growth = report["peak"] - report["base"]
    assert growth < 2 * cap, f"peak RSS grew by {growth / 2**20:.1f} MiB"  # measured: 1.3 x the cap


@pytest.mark.anyio
async def test_arguments_echoed_in_a_tool_error_are_cut(server: LoopbackServer) -> None:
    huge = "p" * 1_000_000
    server.handler = lambda r: (
        OPENAI.text("done") if has_tool_result(r) else OPENAI.tool_call("c1", "read", {"path": huge})
    )

    async def execute(name: str, arguments: dict[str, Any]) -> Any:
        raise ValueError(f"no such file: {arguments['path']}")

    await run_tool_loop(OPENAI.provider(server.url), ask(OPENAI, tools=["read"]), execute, 2)
    (echoed,) = OPENAI.tool_results(server.requests[1])
    assert echoed.startswith("Error: no such file: ppp")
    assert len(echoed) < 2100
    assert "more characters cut" in echoed


# -- 7. tool-call fan-out is bounded ---------------------------------------------------------------


def many_calls(count: int, name: str = "probe") -> Reply:
    reply = OPENAI.tool_call("unused", name, {})
    message = reply.json["choices"][0]["message"]
    message["tool_calls"] = [
        {"id": f"c{i}", "type": "function", "function": {"name": name, "arguments": json.dumps({"n": i})}}
        for i in range(count)
    ]
    return reply


class Probe:
    """A tool that records which calls ran and how many ran at once."""

    def __init__(self) -> None:
        self.ran: list[int] = []
        self.running = 0
        self.most = 0

    async def __call__(self, n: int) -> str:
        self.ran.append(n)
        self.running += 1
        self.most = max(self.most, self.running)
        await anyio.sleep(0.02)
        self.running -= 1
        return "ok"


@pytest.mark.anyio
async def test_a_reply_of_1000_tool_calls_runs_32_at_most_8_at_a_time(server: LoopbackServer) -> None:
    server.handler = lambda r: OPENAI.text("done") if has_tool_result(r) else many_calls(1000)
    probe = Probe()

    async def execute(name: str, arguments: dict[str, Any]) -> Any:
        return await probe(**arguments)

    result = await run_tool_loop(OPENAI.provider(server.url), ask(OPENAI, tools=["probe"]), execute, 2)

    assert sorted(probe.ran) == list(range(32))  # calls 33 to 1000 never ran
    assert probe.most == 8
    results = OPENAI.tool_results(server.requests[1])
    assert len(results) == 1000
    assert results[:32] == ["ok"] * 32
    assert results[32] == (
        "Error: tool call 33 of 1000 was not run: one reply may ask for at most 32 tool calls "
        "(max_tool_calls_per_reply)"
    )
    assert sum(r.error is not None for r in result.tool_calls) == 968


FAN_OUT = """
name: hostile-fan-out
steps:
  - {id: fan, type: agent, prompt: "probe", tools: [probe], max_iterations: 2, retry: {max_retries: 0}}
"""


@pytest.mark.timeout(60)
def test_the_fan_out_limits_come_from_the_provider_options_in_an_airflow_task(
    server: LoopbackServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AIRFLOW__AGENTLOOM__MAX_PARALLEL_TOOL_CALLS", "3")
    monkeypatch.setenv("AIRFLOW__AGENTLOOM__MAX_TOOL_CALLS_PER_REPLY", "10")
    server.handler = lambda r: OPENAI.text("done") if has_tool_result(r) else many_calls(25)
    counter = Probe()

    @tool(name="probe", description="Probe.")
    async def probe(n: int) -> str:
        return await counter(n)

    dag_run = run_task(FAN_OUT, tmp_path, tools=(probe,), provider_gateway=openai_gateway(server))
    assert xcom(dag_run, "fan") == "done"
    assert sorted(counter.ran) == list(range(10))
    assert counter.most == 3
    assert OPENAI.tool_results(server.requests[1])[10].startswith("Error: tool call 11 of 25 was not run")


# -- 8. replay answers only from the recording ---------------------------------------------------


def record(server: LoopbackServer, path: Path, tmp_path: Path) -> ChatRequest:
    """Record a two-turn step (a tool call, then the answer) with --record-tools; return its first request."""
    server.handler = lambda r: (
        OPENAI.text("It is noon.")
        if has_tool_result(r)
        else OPENAI.tool_call("call_1", "clock", {"tz": "UTC"})
    )
    request = ChatRequest(
        model=OPENAI.model, messages=[Message.user("time?")], tools=[ToolSpec(name="clock")], step_id="ask"
    )

    async def clock(name: str, arguments: dict[str, Any]) -> Any:
        return {"time": "12:00"}

    recorder = RecordingProvider(OPENAI.provider(server.url), path, record_tools=True)
    anyio.run(run_tool_loop, recorder, request, clock, 3)
    return request


def marker_tool(marker: Path) -> Any:
    async def execute(name: str, arguments: dict[str, Any]) -> Any:
        marker.touch()  # would mean the tool ran live during a replay
        return {"time": "live"}

    return execute


def edited(path: Path, change: Any) -> Path:
    data = json.loads(path.read_text())
    change(data)
    path.write_text(json.dumps(data))
    return path


def test_replay_of_a_recording_that_lost_a_tool_result_fails_without_running_the_tool(
    server: LoopbackServer, tmp_path: Path
) -> None:
    path = tmp_path / "rec.json"
    request = record(server, path, tmp_path)
    assert json.loads(path.read_text())["_record_tools"] is True
    edited(path, lambda data: data["ask"][0].pop("tool_results"))
    marker = tmp_path / "ran-live"
    with pytest.raises(FixtureError) as caught:
        anyio.run(run_tool_loop, MockProvider(responses_file=path), request, marker_tool(marker), 3)
    assert "entry ask[0] asks for tool call 'call_1' (clock) but holds no recorded result" in str(
        caught.value
    )
    assert str(path) in str(caught.value)
    assert not marker.exists()


def test_replay_of_a_recording_missing_its_last_turn_fails_naming_the_entry(
    server: LoopbackServer, tmp_path: Path
) -> None:
    path = tmp_path / "rec.json"
    request = record(server, path, tmp_path)
    edited(path, lambda data: data["ask"].pop())
    mock = MockProvider(responses_file=path)
    marker = tmp_path / "ran-live"
    with pytest.raises(
        FixtureError, match=r"step 'ask' has 1 recorded turn\(s\); entry ask\[1\] \(turn 2\) is missing"
    ):
        anyio.run(run_tool_loop, mock, request, marker_tool(marker), 5)
    assert len(mock.calls) == 1  # the first turn, once: not replayed again until max_iterations
    assert not marker.exists()  # the first turn's tool call was replayed from the recording


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ({}, "holds no model reply"),
        ({"_version": 2}, "holds no model reply"),
        (
            {"_version": 3, "ask": [{"content": "x"}]},
            "has _version 3; this version of airflow-provider-agentloom reads version 2",
        ),
        ({"_version": "2", "ask": [{"content": "x"}]}, "has _version '2'"),
    ],
)
def test_an_empty_or_unknown_version_recording_is_refused(tmp_path: Path, content: Any, message: str) -> None:
    path = tmp_path / "rec.json"
    path.write_text(json.dumps(content))
    with pytest.raises(FixtureError, match=message.replace("(", r"\(")):
        MockProvider(responses_file=path)
    with pytest.raises(StepError, match=message.replace("(", r"\(")):
        build_gateway(
            WorkflowParser.from_yaml("name: w\nsteps: []").config, base_dir=tmp_path, mock_responses=str(path)
        )


def test_replay_never_answers_with_the_default_mock_reply_but_a_fixture_still_does(tmp_path: Path) -> None:
    rec = tmp_path / "rec.json"
    rec.write_text(json.dumps({"_version": 2, "_record_tools": True, "ask": [{"content": "recorded"}]}))
    other = ChatRequest(model="m", messages=[Message.user("?")], step_id="other")
    with pytest.raises(FixtureError, match="never with the default mock reply"):
        anyio.run(MockProvider(responses_file=rec).complete, other)
    fixture = tmp_path / "fixture.json"  # hand-written: no _version, upstream's lenient fixture
    fixture.write_text(json.dumps({"ask": [{"content": "recorded"}]}))
    assert anyio.run(MockProvider(responses_file=fixture).complete, other).content == "Mock response"


REPLAYED_AGENT = """
name: hostile-replay
steps:
  - {id: ask, type: agent, prompt: "time?", tools: [clock], max_iterations: 3, retry: {max_retries: 0}}
"""


@pytest.mark.timeout(60)
def test_a_replayed_airflow_task_fails_on_a_lost_tool_result_and_runs_nothing_live(tmp_path: Path) -> None:
    """The gateway ``agentloom replay`` builds (the mock on ``--recording``), in a real task."""
    marker = tmp_path / "ran-live"

    @tool(name="clock", description="Tell the time.")
    def clock() -> str:
        marker.touch()
        return "live"

    rec = tmp_path / "rec.json"
    turn = {
        "content": "",
        "tool_calls": [{"id": "call_1", "name": "clock", "arguments": {}}],
        "finish_reason": "tool_calls",
    }
    rec.write_text(json.dumps({"_version": 2, "_record_tools": True, "ask": [turn, {"content": "noon"}]}))
    dag_run = run_task(
        REPLAYED_AGENT, tmp_path, tools=(clock,), llm=LLMOptions(provider="mock", mock_responses=str(rec))
    )
    assert str(dag_run.state) == "failed"
    meta = xcom(dag_run, "ask", key="agentloom")
    assert "entry ask[0] asks for tool call 'call_1' (clock) but holds no recorded result" in meta["error"]
    assert not marker.exists()


# -- 9. a vendor's error inside a 200 reply shows the vendor's message --------------------------


@pytest.mark.anyio
@pytest.mark.parametrize("streamed", [False, True], ids=["complete", "stream"])
async def test_an_error_inside_a_200_reply_shows_the_vendors_message(
    kit: VendorKit, server: LoopbackServer, streamed: bool
) -> None:
    server.script([kit.error(200, f"quota exceeded for key {kit.key} " + "z" * 5000)])
    provider = kit.provider(server.url)
    with pytest.raises(LLMHTTPError) as caught:
        await (provider.stream(ask(kit)) if streamed else provider.complete(ask(kit)))
    message = str(caught.value)
    assert f"{kit.name} sent an error in a successful (2xx) reply:" in message
    assert "quota exceeded for key ***" in message
    assert kit.key not in message
    assert len(message) < 400
