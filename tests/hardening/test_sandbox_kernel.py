"""The kernel layer: what the page's string checks let through, Landlock and a network namespace stop.

Every command below passes the seed page's checks (they are unchanged); each test proves the effect
did not happen with the kernel layer on, and happens in the same call with it off (the control),
so none of them can pass by accident. The sandbox is a workflow's ``config.sandbox``, and the tools
are the ones an Airflow task builds (``WorkflowRunContext.build_registry``, which reads the option).
"""

from __future__ import annotations

import logging
import marshal
import os
import shutil
import socket
import subprocess
import tempfile
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from process_support import wait_for_processes
from sandbox_support import PYTHON_BIN, RunTree, make_tree, python_command

from airflow_provider_agentloom import exceptions, settings
from airflow_provider_agentloom._os.process import REAPER, _read_status, run_shell
from airflow_provider_agentloom.dag.build import build_dag
from airflow_provider_agentloom.exceptions import StepError
from airflow_provider_agentloom.get_provider_info import get_provider_info
from airflow_provider_agentloom.tools import ToolRegistry
from airflow_provider_agentloom.tools.invoke import invoke_tool
from airflow_provider_agentloom.tools.sandbox import kernel as _kernel
from airflow_provider_agentloom.tools.sandbox.policy import KernelSandboxError, ToolSandbox
from airflow_provider_agentloom.workflow.parser import parse_workflow_text

ABI, WHY = _kernel.landlock_abi()
pytestmark = [
    pytest.mark.anyio,
    pytest.mark.skipif(ABI == 0, reason=f"this kernel has no Landlock: {WHY}"),
]

WORKFLOW = """
name: kernel-layer
config:
  sandbox:
    enabled: true
    allowed_commands: [cat, cp, ls, grep, ln, curl, kill, python3]
    danger_opt_in: [python3]
    allowed_paths: [work]
    readable_paths: [data]
    writable_paths: [out]
    allow_network: {allow_network}
steps:
  - id: run
    type: tool
    tool_name: shell_command
    tool_args: {{command: "ls", cwd: "data"}}
"""


@pytest.fixture
def tree(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> RunTree:
    # python3 from the test's own interpreter directory, which the layer lets start.
    monkeypatch.setenv("PATH", f"{PYTHON_BIN}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.delenv("AGENTLOOM_KERNEL_SANDBOX", raising=False)
    return make_tree(tmp_path)


@pytest.fixture
def task_tools(tree: RunTree, monkeypatch: pytest.MonkeyPatch) -> Callable[..., ToolRegistry]:
    """The tools an Airflow task of the workflow builds, under ``[agentloom] kernel_sandbox = mode``."""

    def build(mode: str, *, allow_network: bool = True) -> ToolRegistry:
        workflow = parse_workflow_text(WORKFLOW.format(allow_network=str(allow_network).lower()))
        dag = build_dag(workflow, working_dir=str(tree.base), discover_tools=False)
        monkeypatch.setenv("AIRFLOW__AGENTLOOM__KERNEL_SANDBOX", mode)
        registry: ToolRegistry = dag.task_dict["run"].run_context.build_registry(tree.base)  # type: ignore[attr-defined]
        return registry

    return build


async def shell(tools: ToolRegistry, command: str, cwd: str) -> dict[str, Any]:
    result = await invoke_tool(tools, "shell_command", {"command": command, "cwd": cwd, "timeout": 20})
    assert isinstance(result, dict)
    return result


# ----------------------------------------------------------------------------------- files


async def test_cat_cannot_read_a_directory_only_writable_paths_lists(
    tree: RunTree, task_tools: Callable[..., ToolRegistry]
) -> None:
    for mode, leaks in (("auto", False), ("off", True)):
        tools = task_tools(mode)
        cat = await shell(tools, "cat ../out/old.txt", "data")
        listing = await shell(tools, "ls ../out", "data")
        assert ("written earlier" in cat["stdout"]) is leaks, (mode, cat)
        assert ("old.txt" in listing["stdout"]) is leaks, (mode, listing)
        if not leaks:
            assert "Permission denied" in cat["stderr"]


async def test_cp_cannot_write_under_readable_paths(
    tree: RunTree, task_tools: Callable[..., ToolRegistry]
) -> None:
    for mode, writes in (("auto", False), ("off", True)):
        copy = tree.data / f"copy-{mode}.txt"
        result = await shell(task_tools(mode), f"cp notes.txt {copy.name}", "data")
        assert copy.exists() is writes, (mode, result)


async def test_an_allowed_program_still_works_where_the_lists_allow(
    tree: RunTree, task_tools: Callable[..., ToolRegistry]
) -> None:
    tools = task_tools("required")
    assert (await shell(tools, "grep -c hello notes.txt", "data"))["stdout"] == "1\n"
    assert (await shell(tools, "cp ../data/notes.txt ../out/copy.txt", "work"))["returncode"] == 0
    assert (tree.out / "copy.txt").read_text(encoding="utf-8") == "hello notes\n"
    assert (await shell(tools, "ln -s notes.txt link", "work"))["returncode"] == 0


@pytest.mark.skipif(shutil.which("curl") is None, reason="curl is not installed (`which curl` found none)")
async def test_curl_file_url_reads_nothing(tree: RunTree, task_tools: Callable[..., ToolRegistry]) -> None:
    for mode, leaks in (("auto", False), ("off", True)):
        result = await shell(task_tools(mode), "curl -s file:///etc/passwd", "data")
        assert ("root:" in result["stdout"]) is leaks, (mode, result)


def climb_to_passwd(tree: RunTree) -> tuple[Path, str]:
    """Return a folder deep below work/ and a link target that climbs from work/ to /etc/passwd.

    Checked from the deep folder (an ``ln`` run there), the same text stays inside work/.
    """
    if not Path("/etc/passwd").is_file():
        pytest.skip("this machine has no /etc/passwd")
    depth = len(tree.work.parts) - 1
    deep = tree.work.joinpath(*[f"d{i}" for i in range(depth + 1)])
    deep.mkdir(parents=True)
    return deep, "../" * depth + "etc/passwd"


async def test_a_planted_link_cannot_carry_grep_to_etc_passwd(
    tree: RunTree, task_tools: Callable[..., ToolRegistry]
) -> None:
    # ln's relative target is checked from cwd, deep in work/, where it stays inside; from the
    # link's own directory (work/) the same text climbs to /etc/passwd. The page's check allows it.
    deep, target = climb_to_passwd(tree)
    for mode, leaks in (("auto", False), ("off", True)):
        link = tree.work / f"link-{mode}"
        tools = task_tools(mode)
        planted = await shell(tools, f"ln -s {target} {link}", os.path.relpath(deep, tree.base))
        assert planted["returncode"] == 0, planted
        assert os.path.realpath(link) == "/etc/passwd"
        result = await shell(tools, "grep -R root: .", "work")  # a bare link name would be checked
        assert ("root:x:0" in result["stdout"] or "root:" in result["stdout"]) is leaks, (mode, result)


# --------------------------------------------------------------------------------- network


class _Recorder(BaseHTTPRequestHandler):
    hits: list[str] = []

    def do_GET(self) -> None:
        _Recorder.hits.append(self.path)
        self.send_response(204)
        self.end_headers()

    def log_message(self, format: str, *args: Any) -> None:
        return


@pytest.fixture
def http_server() -> Iterator[tuple[int, list[str]]]:
    _Recorder.hits = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Recorder)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server.server_address[1], _Recorder.hits
    server.shutdown()
    server.server_close()


@pytest.mark.skipif(shutil.which("curl") is None, reason="curl is not installed (`which curl` found none)")
async def test_no_tcp_connection_with_allow_network_false(
    task_tools: Callable[..., ToolRegistry], http_server: tuple[int, list[str]]
) -> None:
    port, hits = http_server
    for mode, arrives in (("auto", False), ("off", True)):
        result = await shell(
            task_tools(mode, allow_network=False), f"curl -s -m 5 http://127.0.0.1:{port}/{mode}", "data"
        )
        assert (f"/{mode}" in hits) is arrives, (mode, result, hits)


UDP_SEND = (
    'import socket\nsocket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(b"{mode}", ("127.0.0.1", {port}))'
)


async def test_no_udp_datagram_with_allow_network_false(
    tree: RunTree, task_tools: Callable[..., ToolRegistry]
) -> None:
    # Landlock governs TCP only: the datagram is stopped by the network namespace.
    receiver = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    receiver.bind(("127.0.0.1", 0))
    receiver.settimeout(0.5)  # the datagram, if sent, was sent before the command returned
    port = receiver.getsockname()[1]
    try:
        for mode, arrives in (("auto", False), ("off", True)):
            command = python_command(UDP_SEND.format(mode=mode, port=port))
            result = await shell(task_tools(mode, allow_network=False), command, "data")
            try:
                received = receiver.recv(64)
            except TimeoutError:
                received = b""
            assert (received == mode.encode()) is arrives, (mode, result)
    finally:
        receiver.close()


# --------------------------------------------------------------------------------- signals


@pytest.mark.skipif(ABI < 6, reason=f"signal scoping needs Landlock ABI 6 (this kernel: {ABI})")
async def test_a_command_cannot_signal_a_process_outside_it(
    tree: RunTree, task_tools: Callable[..., ToolRegistry]
) -> None:
    for mode, dies in (("auto", False), ("off", True)):
        victim = subprocess.Popen(["sleep", "60"])
        try:
            await shell(task_tools(mode), f"kill -9 {victim.pid}", "data")
            try:
                victim.wait(timeout=0.5)  # kill -9, if it worked, did before the command returned
            except subprocess.TimeoutExpired:
                pass
            assert (victim.returncode is not None) is dies, mode
        finally:
            victim.kill()
            victim.wait(timeout=10)


# ------------------------------------------------------------------- auto, required and off


async def test_required_where_the_kernel_has_no_landlock_runs_nothing(
    tree: RunTree, task_tools: Callable[..., ToolRegistry], monkeypatch: pytest.MonkeyPatch
) -> None:
    # The one stand-in for the kernel: the probe answers "no Landlock", as an old kernel would.
    monkeypatch.setattr(_kernel, "landlock_abi", lambda: (0, "the kernel was built without Landlock"))
    marker = tree.work / "ran"
    with pytest.raises(
        KernelSandboxError, match="kernel_sandbox = required, but Landlock is unavailable"
    ) as info:
        await shell(task_tools("required"), f"cp ../data/notes.txt {marker}", "work")
    assert info.value.retryable is False
    assert str(info.value).startswith("Sandbox violation (shell_command): ")
    assert not marker.exists()


def test_kernel_sandbox_error_is_a_sandbox_violation_of_the_one_error_tree() -> None:
    assert KernelSandboxError is exceptions.KernelSandboxError  # tools.sandbox re-exports it
    assert issubclass(KernelSandboxError, exceptions.SandboxViolationError)
    assert KernelSandboxError("no Landlock").retryable is False


async def test_auto_where_the_kernel_has_no_landlock_runs_and_logs_once(
    task_tools: Callable[..., ToolRegistry], monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(_kernel, "landlock_abi", lambda: (0, "pretend: no Landlock here"))
    monkeypatch.setattr(_kernel, "_logged", set())
    tools = task_tools("auto")
    with caplog.at_level(logging.WARNING, logger="airflow_provider_agentloom.tools.sandbox.policy"):
        first = await shell(tools, "cat ../out/old.txt", "data")
        await shell(tools, "cat ../out/old.txt", "data")
    assert first["stdout"] == "written earlier\n"  # the string checks only, as the page has them
    warnings = [r.getMessage() for r in caplog.records if "pretend: no Landlock here" in r.getMessage()]
    assert len(warnings) == 1, warnings


async def test_required_reports_what_it_applied(
    tree: RunTree, task_tools: Callable[..., ToolRegistry]
) -> None:
    sandbox = tree.sandbox(allow_network=False, kernel_sandbox="required")
    plan = _kernel.plan_for(sandbox, {"PATH": os.environ["PATH"]})
    assert plan is not None
    assert plan.landlock is not None
    result = await run_shell(
        "true", cwd=str(tree.work), env={"PATH": os.environ["PATH"]}, timeout=20,
        kernel={"landlock": plan.landlock, "netns": plan.netns, "required": True},
    )  # fmt: skip
    assert result.report["kernel"]["landlock"] == "applied"
    assert result.report["kernel"]["netns"] in ("netns", "userns+netns")
    assert result.returncode == 0


async def test_nothing_under_the_lists_can_be_executed(tree: RunTree) -> None:
    # A program copied into allowed_paths (or made there by a model) cannot run; PATH's can.
    shutil.copy("/bin/true", tree.work / "copied-true")
    (tree.work / "script.sh").write_text("#!/bin/sh\necho ran\n", encoding="utf-8")
    for name in ("copied-true", "script.sh"):
        (tree.work / name).chmod(0o755)
    env = {"PATH": os.environ["PATH"]}
    plan = _kernel.plan_for(tree.sandbox(kernel_sandbox="required"), env)
    assert plan is not None
    kernel = {"landlock": plan.landlock, "netns": plan.netns, "required": True}
    result = await run_shell(
        "./copied-true; echo $?; ./script.sh; true", cwd=str(tree.work), env=env, timeout=20, kernel=kernel
    )
    assert result.stdout == b"126\n", result
    assert result.stderr.count(b"Permission denied") == 2, result
    assert result.returncode == 0  # /usr/bin/true ran


def test_a_refusal_in_the_command_process_is_a_kernel_sandbox_error(tree: RunTree) -> None:
    plan = _kernel.KernelPlan(required=True, landlock=None, netns=True)
    report = {"kernel": {"netns": "error: [Errno 1] unshare: Operation not permitted"}, "refused": ["netns"]}
    with pytest.raises(KernelSandboxError, match="netns: error: .*Operation not permitted"):
        _kernel.check_report(plan, report)


def test_off_and_a_disabled_sandbox_have_no_kernel_layer(tree: RunTree) -> None:
    env = {"PATH": os.environ["PATH"]}
    assert _kernel.plan_for(tree.sandbox(kernel_sandbox="off"), env) is None
    assert _kernel.plan_for(tree.sandbox(enabled=False, kernel_sandbox="required"), env) is None


def test_the_plan_grants_only_the_lists_and_what_programs_need(tree: RunTree) -> None:
    plan = _kernel.plan_for(tree.sandbox(allow_network=False), {"PATH": "/usr/bin:/bin"})
    assert plan is not None
    rules = dict(plan.rules)
    assert rules[str(tree.data)] == _kernel.READ
    assert rules[str(tree.out)] == _kernel.WRITE
    assert not any(
        path in ("/etc", "/etc/passwd", "/proc", "/tmp", os.path.expanduser("~")) for path in rules
    )
    assert not any(path.startswith(str(tree.secret)) for path in rules)
    assert plan.landlock is not None
    assert plan.landlock["handled_net"] != 0 or ABI < 4


# ------------------------------------------------------------------------------ the option


def test_the_option_is_declared_with_default_auto() -> None:
    option = get_provider_info()["config"]["agentloom"]["options"]["kernel_sandbox"]
    assert option["default"] == "auto"
    assert option["type"] == "string"


def test_the_option_is_read_at_call_time(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AGENTLOOM_KERNEL_SANDBOX", raising=False)
    monkeypatch.delenv("AIRFLOW__AGENTLOOM__KERNEL_SANDBOX", raising=False)
    assert settings.kernel_sandbox() == "auto"
    monkeypatch.setenv("AIRFLOW__AGENTLOOM__KERNEL_SANDBOX", "Required")
    assert settings.kernel_sandbox() == "required"
    monkeypatch.setenv("AGENTLOOM_KERNEL_SANDBOX", "off")  # the plain-Python variable wins
    assert settings.kernel_sandbox() == "off"
    assert ToolSandbox(enabled=True).kernel_sandbox == "off"


@pytest.mark.parametrize(
    ("variable", "named"),
    [
        ("AIRFLOW__AGENTLOOM__KERNEL_SANDBOX", r"\[agentloom\] kernel_sandbox"),
        ("AGENTLOOM_KERNEL_SANDBOX", "AGENTLOOM_KERNEL_SANDBOX"),
    ],
)
def test_a_bad_value_is_refused_naming_where_it_was_set(
    monkeypatch: pytest.MonkeyPatch, variable: str, named: str
) -> None:
    monkeypatch.delenv("AGENTLOOM_KERNEL_SANDBOX", raising=False)
    monkeypatch.setenv(variable, "strict")
    with pytest.raises(ValueError, match=f"{named}: expected one of auto, required, off; got 'strict'"):
        settings.kernel_sandbox()


def test_a_bad_option_fails_the_task_at_once_naming_it(
    tree: RunTree, task_tools: Callable[..., ToolRegistry]
) -> None:
    with pytest.raises(
        StepError, match=r"\[agentloom\] kernel_sandbox: expected one of auto, required, off"
    ) as info:
        task_tools("sometimes")
    assert info.value.retryable is False


def test_a_bad_keyword_is_refused() -> None:
    with pytest.raises(ValueError, match="kernel_sandbox: expected one of auto, required, off"):
        ToolSandbox(kernel_sandbox="on")  # type: ignore[arg-type]


# ------------------------------------------------------------------------------ in an Airflow task

DAG_WORKFLOW = """
name: hardening-kernel-layer
config:
  sandbox:
    enabled: true
    allowed_commands: [ln, grep, cat]
    allowed_paths: [work]
    readable_paths: [data]
    writable_paths: [out]
steps:
  - id: plant
    type: tool
    tool_name: shell_command
    tool_args: {{command: "ln -s {target} {link}", cwd: "{deep}"}}
  - id: leak
    type: tool
    depends_on: [plant]
    tool_name: shell_command
    tool_args: {{command: "grep -R root: .", cwd: work}}
  - id: peek
    type: tool
    tool_name: shell_command
    tool_args: {{command: "cat ../out/old.txt", cwd: data}}
"""


def test_an_airflow_task_runs_its_commands_under_the_kernel_layer(tree: RunTree) -> None:
    from airflow_support import run_dag_test, xcom

    deep, target = climb_to_passwd(tree)
    text = DAG_WORKFLOW.format(target=target, link=tree.work / "link", deep=os.path.relpath(deep, tree.base))
    dag = build_dag(parse_workflow_text(text), working_dir=str(tree.base), discover_tools=False)
    dag_run = run_dag_test(dag)
    assert os.path.realpath(tree.work / "link") == "/etc/passwd"  # planted, as the page's check allows
    leak, peek = xcom(dag_run, "leak"), xcom(dag_run, "peek")
    assert "root:" not in leak["stdout"], leak
    assert "Permission denied" in leak["stderr"], leak
    assert peek["returncode"] != 0
    assert "written earlier" not in peek["stdout"], peek


# --------------------------------------------------------------------- as an unprivileged worker

SETPRIV, SYSTEM_PYTHON = shutil.which("setpriv"), "/usr/bin/python3"


@pytest.fixture
def open_tree() -> Iterator[Path]:
    """A tree that user ``nobody`` may enter (pytest's own temporary folders are root's only)."""
    base = Path(tempfile.mkdtemp(prefix="agentloom-unprivileged-"))
    try:
        for name in ("data", "out", "secret"):
            (base / name).mkdir()
        (base / "data" / "notes.txt").write_text("hello notes\n", encoding="utf-8")
        (base / "secret" / "key.txt").write_text("SECRET-CONTENT\n", encoding="utf-8")
        for path in (base, *base.rglob("*")):
            path.chmod(0o777 if path.is_dir() else 0o644)
        yield base
    finally:
        shutil.rmtree(base, ignore_errors=True)


def run_as_nobody(base: Path, command: str) -> tuple[int, str, dict[str, Any]]:
    """Run the reaper itself as user ``nobody`` (system Python), as a non-root worker would."""
    sandbox = ToolSandbox(
        enabled=True, readable_paths=["data"], writable_paths=["out"], allow_network=False, base_dir=base
    )
    env = {"PATH": "/usr/bin:/bin"}
    plan = _kernel.plan_for(sandbox, env)
    assert plan is not None
    status_read, status_write = os.pipe()
    spec = {
        "command": command, "env": env, "parent": os.getpid(), "status_fd": status_write, "cgroup": True,
        "landlock": plan.landlock, "netns": plan.netns, "required": False,
    }  # fmt: skip
    try:
        done = subprocess.run(
            [str(SETPRIV), "--reuid=65534", "--regid=65534", "--clear-groups", SYSTEM_PYTHON, "-I", "-S", REAPER],
            input=marshal.dumps(spec), capture_output=True, pass_fds=(status_write,), cwd=base, timeout=30, check=False,
        )  # fmt: skip
    finally:
        os.close(status_write)
    report = _read_status(status_read)
    return done.returncode, done.stdout.decode(), report


@pytest.mark.skipif(os.geteuid() != 0, reason="switching to user nobody needs root")
@pytest.mark.skipif(
    SETPRIV is None or not os.path.exists(SYSTEM_PYTHON), reason="needs setpriv and /usr/bin/python3"
)
def test_a_non_root_worker_gets_landlock_a_user_namespace_and_the_subreaper(
    open_tree: Path, marker: str
) -> None:
    receiver = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    receiver.bind(("127.0.0.1", 0))
    receiver.settimeout(0.5)
    send = (
        'python3 -c "import socket; socket.socket(socket.AF_INET, socket.SOCK_DGRAM)'
        f".sendto(b'x', ('127.0.0.1', {receiver.getsockname()[1]}))\""
    )
    try:
        code, stdout, report = run_as_nobody(
            open_tree, f"id -u; cat data/notes.txt; cat secret/key.txt; {send}; setsid -f sleep {marker}"
        )
        try:
            received = receiver.recv(8)
        except TimeoutError:
            received = b""
    finally:
        receiver.close()
    assert code == 0, report
    assert report["kernel"] == {"netns": "userns+netns", "landlock": "applied"}, report
    assert report["cgroup"].startswith("none: cannot create"), report  # not root: the subreaper alone
    assert stdout.splitlines()[:2] == ["65534", "hello notes"]
    assert "SECRET" not in stdout
    assert received == b""  # no datagram left the network namespace
    assert wait_for_processes(marker, present=False) == []
