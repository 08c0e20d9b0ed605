"""Upstream's example corpus through ``agentloom run FILE --provider mock --json``, one CLI process each.

Every one of the 33 examples is a row of ``CASES`` or in ``EXCLUDED`` with its reason. All step types
run: llm_call, tool, router, subworkflow (its children reported as ``<sub_id>.<child_id>``) and
approval_gate (answered in advance with ``--approve``/``--reject``, or the run pauses at it). Every
model call answers from the example's own fixture when it names one, else with the default reply
"Mock response" (which matches no router condition of the corpus: each router takes its default,
and its other children are skipped — a skipped subworkflow reports its own step only).

The ``http_request`` tool steps GET public URLs (jsonplaceholder.typicode.com, httpbin.org): a
loopback HTTPS server answers them (``served_hosts``: fixed JSON bodies, a certificate from a test CA
the CLI trusts with ``SSL_CERT_FILE``, and the network guard's host map sending those names to it).
The examples that need other public hosts (image attachments) or local media files fail, and each
such row says why and checks that the error names that reason (the URL, the file path), so a
failure for any other reason fails the test.

Every run gets a fresh copy of its example (plus the fixture folder it names) in a temporary
directory it runs from, an Airflow home in a temporary directory, and a network guard loaded in
the CLI process itself (``sitecustomize`` on ``PYTHONPATH``: no DNS look-up and no connection
except to loopback and the served names), so the results do not depend on whether the machine is
online — and nothing leaves it. The table's runs go two at a time (see ``TableRuns``); ~8 s each,
~17 s for the ones that retry, 20–35 s for the subworkflow examples (10 and 11 report 18 and 16
steps).
"""

from __future__ import annotations

import http.server
import json
import queue
import re
import shutil
import ssl
import subprocess
import threading
import time
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from cli_support import cli_env, run_cli
from compatibility_report import Outcome, check, render
from tls_support import write_tls_files

from airflow_provider_agentloom.llm.fixtures import prompt_hash_of
from airflow_provider_agentloom.runner.warm import client

MOCK_DEFAULT_REPLY = "Mock response"
CORPUS_TOOLS = Path(__file__).resolve().parents[1] / "data" / "corpus_tools"
PROGRESS_LINE = re.compile(r"^  (?:ok|FAILED|TIMEOUT|skipped|paused) +(\S+)  \(", re.MULTILINE)

# The public URLs the examples' http_request tool steps GET, answered by a loopback HTTPS server
# (``served_hosts``) with fixed bodies shaped like the real services' answers.
_POSTS = [
    {
        "userId": 1,
        "id": 1,
        "title": "sunt aut facere repellat provident occaecati excepturi optio reprehenderit",
        "body": "quia et suscipit\nsuscipit recusandae consequuntur expedita et cum",
    },
    {"userId": 1, "id": 2, "title": "qui est esse", "body": "est rerum tempore vitae\nsequi sint nihil"},
    {
        "userId": 1,
        "id": 3,
        "title": "ea molestias quasi exercitationem repellat qui ipsa sit aut",
        "body": "et iusto sed quo iure\nvoluptatem occaecati omnis eligendi aut ad",
    },
]
_USER = {
    "id": 1,
    "name": "Leanne Graham",
    "username": "Bret",
    "email": "Sincere@april.biz",
    "address": {"street": "Kulas Light", "suite": "Apt. 556", "city": "Gwenborough", "zipcode": "92998-3874"},
    "phone": "1-770-736-8031 x56442",
    "website": "hildegard.org",
    "company": {"name": "Romaguera-Crona", "catchPhrase": "Multi-layered client-server neural-net"},
}
SERVED: dict[str, Any] = {
    "https://jsonplaceholder.typicode.com/posts/1": _POSTS[0],
    "https://jsonplaceholder.typicode.com/users/1": _USER,
    "https://jsonplaceholder.typicode.com/posts?_limit=3": _POSTS,
    "https://httpbin.org/json": {
        "slideshow": {
            "author": "Yours Truly",
            "date": "date of publication",
            "title": "Sample Slide Show",
            "slides": [{"title": "Wake up to WonderWidgets!", "type": "all"}],
        }
    },
}
SERVED_HOSTS = tuple(dict.fromkeys(url.split("/")[2] for url in SERVED))


class _PublicHostHandler(http.server.BaseHTTPRequestHandler):
    """GET of a ``SERVED`` URL (its host from the Host header): its JSON; anything else: 404."""

    def do_GET(self) -> None:
        host = self.headers.get("Host", "").split(":")[0]
        body = SERVED.get(f"https://{host}{self.path}")
        payload = json.dumps(body if body is not None else {"error": "not served"}).encode()
        self.send_response(200 if body is not None else 404)
        self.send_header("Content-Type", "application/json; charset=utf-8")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, format: str, *args: Any) -> None:
        pass


@dataclass(frozen=True)
class ServedHosts:
    """The loopback HTTPS server of ``SERVED`` and what a CLI process needs to reach it."""

    env: dict[str, str]  # SSL_CERT_FILE (the test CA) and the network guard's host map


@pytest.fixture(scope="module")
def served_hosts(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServedHosts]:
    """A threading HTTPS server on 127.0.0.1 with a certificate for ``SERVED_HOSTS`` from a test CA.

    The CLI processes trust the CA (``SSL_CERT_FILE``), and their network guard resolves those names
    to 127.0.0.1 and sends their port 443 to the server (``AGENTLOOM_TEST_HOST_MAP``).
    """
    ca, cert, key = write_tls_files(tmp_path_factory.mktemp("tls"), *SERVED_HOSTS)
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert, key)
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _PublicHostHandler)
    server.daemon_threads = True
    server.socket = context.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, name="served-hosts", daemon=True)
    thread.start()
    port = server.server_address[1]
    host_map = ",".join(f"{host}=127.0.0.1:{port}" for host in SERVED_HOSTS)
    try:
        yield ServedHosts({"SSL_CERT_FILE": str(ca), "AGENTLOOM_TEST_HOST_MAP": host_map})
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


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
    served: bool = False  # its http_request tool steps GET SERVED URLs, answered by ``served_hosts``


def _routed(why: str, router: str, target: str, skipped: tuple[str, ...], *, served: bool = False) -> Expect:
    """A router's example: the mock's reply matches no condition, so the default branch runs."""
    return Expect("success", why, skipped=skipped, route=(router, target), served=served)


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
        "success",
        "http_request GET https://httpbin.org/json (the URL from the state), one llm_call",
        served=True,
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
    "06": _routed(
        "http_request GET https://jsonplaceholder.typicode.com/users/1 and an llm_call in parallel, "
        "a score, a lead router",
        "route",
        "log_and_archive",
        ("draft_outreach", "nurture_sequence"),
        served=True,
    ),
    "07": _routed(
        "http_request GET https://jsonplaceholder.typicode.com/posts?_limit=3, two llm_calls, a "
        "severity router",
        "route",
        "add_to_backlog",
        ("incident_response", "create_ticket"),
        served=True,
    ),
    "08": Expect("success", "four chained llm_calls"),
    # A subworkflow's child steps are reported as "<sub_id>.<child_id>"; one a router skipped reports
    # only its own step, skipped.
    "09": _routed(
        "two http_request GETs of jsonplaceholder.typicode.com in parallel, four parallel checks, an "
        "aggregate, a risk router whose 'high' target is an inline subworkflow of three llm_calls",
        "route_risk",
        "approve_order",
        ("deep_investigation", "enhanced_review"),
        served=True,
    ),
    "10": Expect(
        "success",
        "http_request GET https://jsonplaceholder.typicode.com/posts/1, three parallel inline "
        "subworkflows of four chained llm_calls each, two llm_calls",
        served=True,
    ),
    "11": _routed(
        "http_request GET https://jsonplaceholder.typicode.com/posts/1, two parallel inline "
        "subworkflows of three llm_calls and an llm_call, an aggregate, a decision router whose "
        "'approve' target is an inline subworkflow of two llm_calls",
        "route_decision",
        "assign_adjuster",
        ("auto_approve", "deny_claim"),
        served=True,
    ),
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

# What each row's run did, for docs/compatibility.md (the last test renders it). The rows and that
# test share this process: under pytest-xdist the whole module runs on one worker (conftest.py).
OUTCOMES: dict[str, Outcome] = {}

# Examples left out of the table above, with the reason.
EXCLUDED = {
    "18": "tool steps only, refused by the sandbox by design; each refusal's reason is checked by "
    "tests/dag/test_tool_wiring.py and tests/tools/test_example_18.py",
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


def run_example(
    examples_dir: Path,
    example_id: str,
    tmp_path: Path,
    home: Path,
    *extra: str,
    served: ServedHosts | None = None,
    warm: bool = False,
) -> ExampleRun:
    """Copy the example (and the fixture folder it names) to ``tmp_path/work`` and run it from there.

    With ``served``, the run reaches the ``SERVED`` URLs on the loopback server; without it, it
    reaches no public host. With ``warm``, it runs in the home's warm runner.
    """
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
    env = cli_env(home, warm=warm, **(served.env if served is not None else {}))
    started = time.monotonic()
    proc = run_cli("run", source.name, "--provider", "mock", "--json", *extra, cwd=work, env=env)
    return ExampleRun(proc, workflow, work, home, time.monotonic() - started, example_id)


class TableRuns:
    """The CLI runs of the table's selected rows, started together on first use, two at a time.

    Several examples wait seconds between retries (upstream's back-off), so two runs overlap. Each
    worker has its own Airflow home (SQLite is never shared by two runs at once), served by its warm
    runner: the session's warm home and one of the table's own; each run its own directory.
    """

    WORKERS = 2

    def __init__(self, base: Path, selected: list[str], served: ServedHosts, warm_home: Path) -> None:
        self.base = base
        self.selected = selected
        self.served = served
        self.own_home = base / "home-1"
        self.homes: queue.Queue[Path] = queue.Queue()
        for home in (warm_home, self.own_home):
            self.homes.put(home)
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
            served = self.served if CASES[example_id].served else None
            return run_example(
                examples_dir, example_id, self.base / f"example-{example_id}", home, served=served, warm=True
            )
        finally:
            self.homes.put(home)

    def drain(self) -> None:
        """Wait for every started run: the next run on the session's warm home is alone on it."""
        for future in self.futures.values():
            future.exception()

    def close(self) -> None:
        if self.pool is not None:
            self.pool.shutdown(wait=True, cancel_futures=True)
        client.stop(self.own_home)  # the session stops the warm home's runner


@pytest.fixture(scope="module")
def table_runs(
    request: pytest.FixtureRequest,
    tmp_path_factory: pytest.TempPathFactory,
    served_hosts: ServedHosts,
    warm_home: Path,
) -> Iterator[TableRuns]:
    selected = [
        str(item.callspec.params["example_id"])
        for item in request.session.items
        if isinstance(item, pytest.Function) and item.originalname == "test_example_runs_on_the_mock_provider"
    ]
    runs = TableRuns(tmp_path_factory.mktemp("examples"), selected, served_hosts, warm_home)
    yield runs
    runs.close()


def test_the_table_covers_every_example(examples_dir: Path) -> None:
    """Each of the corpus's examples is a row of the table or excluded with its reason."""
    examples = {path.name.split("_", 1)[0] for path in examples_dir.glob("*.yaml")}
    assert len(examples) == 33
    assert examples == set(CASES) | set(EXCLUDED)
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
    OUTCOMES[example_id] = Outcome.of(example_file(examples_dir, example_id).name, document, run.work)
    steps = document["step_results"]
    assert document["status"] == expect.status, (expect.why, document["error"], run.proc.stderr[-3000:])
    assert set(steps) == set(reported_steps(run)), expect.why
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


@dataclass(frozen=True)
class Reported:
    """A step the run reports: its YAML, and the reported steps that must end before it does."""

    step: dict[str, Any]
    after: tuple[str, ...]
    child: bool  # inside a subworkflow: its output goes to the child's state


def reported_steps(run: ExampleRun) -> dict[str, Reported]:
    """The results a run reports, by id: every step but a paused run's ``not_run``, and the children
    of each subworkflow that started (``<sub_id>.<child_id>``, recursively) just before the
    subworkflow's own step. A subworkflow a router skipped reports its own step only."""
    expect = CASES.get(run.example_id)
    not_run = set(expect.not_run if expect else ())
    skipped = set(expect.skipped if expect else ())
    found: dict[str, Reported] = {}

    def add(steps: list[dict[str, Any]], prefix: str, entry: tuple[str, ...]) -> None:
        for step in steps:
            sid = prefix + step["id"]
            if sid in not_run:
                continue
            after = tuple(prefix + parent for parent in step.get("depends_on") or []) or entry
            children: list[str] = []
            if step["type"] == "subworkflow" and sid not in skipped:
                inline = step["workflow_inline"]["steps"]
                add(inline, f"{sid}.", after)
                children = [f"{sid}.{child['id']}" for child in inline]
            found[sid] = Reported(step, (*after, *children), child=bool(prefix))

    add(run.workflow["steps"], "", ())
    return found


def check_progress_order(run: ExampleRun) -> None:
    """The progress lines (stderr) name every reported step once, never a step before one it waits for
    (a subworkflow's children after the steps it depends on, and before its own step)."""
    reported = reported_steps(run)
    order = PROGRESS_LINE.findall(run.proc.stderr)
    assert sorted(order) == sorted(reported), run.proc.stderr[-3000:]
    for sid, entry in reported.items():
        for parent in entry.after:
            assert order.index(parent) < order.index(sid), (parent, sid, order)


def check_success(run: ExampleRun, expect: Expect) -> None:
    """Every step succeeded at once, but a router's skipped branches; outputs reached the state (a
    subworkflow's children: the child's state, its output); model steps answered as the mock does;
    http_request steps got the loopback server's answer."""
    document = run.document
    has_fixture = bool((run.workflow.get("config") or {}).get("responses_file"))
    if expect.route is not None:
        router, target = expect.route
        assert document["step_results"][router]["output"] == target
        assert document["final_state"]["steps"][router] == {"output": target, "status": "success"}
    reported = reported_steps(run)
    for sid, entry in reported.items():
        step = entry.step
        result = document["step_results"][sid]
        if sid in expect.skipped:  # not chosen by a router: skipped, with no error (upstream)
            assert (result["status"], result["error"], result["attempts"]) == ("skipped", None, 0)
            assert sid not in document["final_state"]["steps"]
            continue
        assert result["status"] == "success", (sid, result["error"])
        assert result["attempts"] == 1
        if step.get("output") and not entry.child:
            assert document["final_state"][step["output"]] == result["output"]
        if step["type"] == "subworkflow":  # its output: the child's final state (no return_keys here)
            for child in step["workflow_inline"]["steps"]:
                if child.get("output"):
                    child_result = document["step_results"][f"{sid}.{child['id']}"]
                    assert result["output"][child["output"]] == child_result["output"]
        if step["type"] == "approval_gate":
            answer = "rejected" if "--reject" in expect.args else "approved"
            assert result["output"] == answer
        if step["type"] == "llm_call" and not has_fixture:
            assert result["output"] == MOCK_DEFAULT_REPLY
            assert result["provider"] == "mock"
        if step["type"] == "tool" and step["tool_name"] == "http_request":
            url = step["tool_args"]["url"]
            if url.startswith("state."):  # upstream: a tool argument "state.KEY" is that state value
                url = run.workflow["state"][url.removeprefix("state.")]
            assert expect.served, f"{sid} GETs {url}: mark the row served=True or say why it fails"
            assert result["output"]["status_code"] == 200, (sid, url)
            assert json.loads(result["output"]["body"]) == SERVED[url], (sid, url)


@pytest.mark.timeout(300)
def test_example_35_replays_its_fixture_and_its_tool_error_goes_back_to_the_model(
    examples_dir: Path, tmp_path: Path, warm_home: Path, table_runs: TableRuns
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

    table_runs.drain()
    home = warm_home
    run = run_example(examples_dir, "35", tmp_path, home, "--record", "rec.json", "--record-tools", warm=True)
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
    assert tool_line.startswith("Tool call http_request: GET https://httpbin.org/")
    assert f" -> failed: {error.removeprefix('Error: ')}, " in tool_line
    assert tool_line.endswith(" ms")
    usage = ask["token_usage"]
    model_line = (
        f"Model gpt-4o-mini via openai: {usage['prompt_tokens']} prompt + {usage['completion_tokens']}"
    )
    assert any(event.startswith(model_line) for event in events)


def test_the_compatibility_report_matches_this_run(examples_dir: Path) -> None:
    """``docs/compatibility.md`` is this session's table runs rendered with the table's reasons.

    The file's last test, so every row has run before it (it skips when some did not run, as with -k).
    """
    missing = sorted(set(CASES) - set(OUTCOMES))
    if missing:
        pytest.skip(f"needs every row of the table run in this session (not run: {', '.join(missing)})")
    text = render(
        {key: OUTCOMES[key] for key in sorted(OUTCOMES)},
        {key: expect.why for key, expect in CASES.items()},
        {key: (example_file(examples_dir, key).name, why) for key, why in EXCLUDED.items()},
    )
    problem = check(text)
    assert problem is None, problem
