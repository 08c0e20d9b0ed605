"""``shell_command`` leaves no process behind: detached, double-forked and daemonised ones included.

Each test starts processes that carry a unique marker in their command line (``sleep 1200.<n>``),
then searches all of ``/proc`` for it: nothing may be left, the output must still be captured, and a
detached process holding the pipes must not keep the call waiting for its timeout.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import anyio
import pytest
from process_support import processes_with, wait_for_count, wait_for_processes, waits_on_a_pipe
from sandbox_support import PYTHON_BIN, make_tree, python_command, registry
from wait_support import wait_until

from airflow_provider_agentloom._os.process import CommandResult, run_shell
from airflow_provider_agentloom._os.reaper import cgroup_dir_for
from airflow_provider_agentloom.tools.invoke import invoke_tool

pytestmark = [pytest.mark.anyio, pytest.mark.skipif(sys.platform != "linux", reason="Linux only")]

# A program that daemonises the classic way: fork, setsid, fork again, close every descriptor.
_DAEMON_CODE = """import os
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        os.closerange(0, 1024)
        os.execvp("sleep", ("sleep", "{marker}"))
    os._exit(0)
print("main-done")"""


DAEMON = python_command(_DAEMON_CODE)


UNSANDBOXED_FORMS = [
    pytest.param("setsid -f sleep {marker}; echo main-done", id="setsid"),
    pytest.param("nohup sleep {marker} > /dev/null 2>&1 & echo main-done", id="nohup-background"),
    pytest.param("sh -c '(sleep {marker} &)'; echo main-done", id="double-fork"),
    pytest.param("setsid sh -c 'sleep {marker} & sleep {marker}' & echo main-done", id="own-session-tree"),
    pytest.param(DAEMON, id="daemon"),
]


@pytest.mark.parametrize("form", UNSANDBOXED_FORMS)
async def test_sandbox_disabled_leaves_no_process(tmp_path: Path, marker: str, form: str) -> None:
    result = await invoke_tool(
        registry(base=tmp_path), "shell_command", {"command": form.format(marker=marker), "timeout": 60}
    )
    assert result["returncode"] == 0, result  # not -1: the call did not wait for the detached process
    assert result["stdout"] == "main-done\n"  # still captured
    assert wait_for_processes(marker, present=False) == []


SANDBOXED_FORMS = [
    pytest.param("setsid -f sleep {marker}", ["setsid", "sleep"], id="setsid"),
    pytest.param(DAEMON, ["python3"], id="daemon"),
]


@pytest.mark.parametrize(("form", "launchers"), SANDBOXED_FORMS)
async def test_opted_in_launcher_leaves_no_process(
    tmp_path: Path, marker: str, form: str, launchers: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # python3 is found in the test's own interpreter directory, so the kernel layer lets it start.
    monkeypatch.setenv("PATH", f"{PYTHON_BIN}{os.pathsep}{os.environ['PATH']}")
    tree = make_tree(tmp_path)
    sandbox = tree.sandbox(allowed_commands=launchers, danger_opt_in=launchers)
    result = await invoke_tool(
        registry(sandbox),
        "shell_command",
        {"command": form.format(marker=marker), "cwd": "work", "timeout": 60},
    )
    assert result["returncode"] == 0, result
    assert wait_for_processes(marker, present=False) == []


async def test_timeout_kills_the_detached_processes_too(tmp_path: Path, marker: str) -> None:
    command = f"echo before; setsid -f sleep {marker}; sh -c '(sleep {marker} &)'; sleep {marker}"
    result = await invoke_tool(registry(base=tmp_path), "shell_command", {"command": command, "timeout": 1})
    assert result == {"returncode": -1, "stdout": "before\n", "stderr": "Command timed out"}
    assert wait_for_processes(marker, present=False) == []


async def test_cancelling_the_call_kills_the_detached_processes(tmp_path: Path, marker: str) -> None:
    tools = registry(base=tmp_path)
    with anyio.move_on_after(1) as scope:
        await invoke_tool(tools, "shell_command", {"command": f"setsid -f sleep {marker}; sleep {marker}"})
    assert scope.cancelled_caught
    assert wait_for_processes(marker, present=False) == []


async def test_without_a_cgroup_the_subreaper_still_kills_everything(tmp_path: Path, marker: str) -> None:
    command = f"setsid -f sleep {marker}; sh -c '(sleep {marker} &)'; echo main-done"
    result = await run_shell(command, cwd=str(tmp_path), env=None, timeout=30, kernel={"cgroup": False})
    assert result.report["cgroup"] == "none: not asked"
    assert result.stdout == b"main-done\n"
    assert result.report["leftovers"] >= 2
    assert wait_for_processes(marker, present=False) == []


async def test_the_cgroup_is_used_and_removed_where_it_can_be_made(tmp_path: Path, marker: str) -> None:
    result = await run_shell(f"setsid -f sleep {marker}", cwd=str(tmp_path), env=None, timeout=30)
    cgroup = result.report["cgroup"]
    if cgroup.startswith("none"):
        pytest.skip(f"no writable cgroup v2 here ({cgroup})")
    assert not os.path.exists(cgroup)
    assert wait_for_processes(marker, present=False) == []


@pytest.mark.parametrize("clone3", [True, False], ids=["started-in-it", "moved-in"])
async def test_the_command_runs_in_the_cgroup_from_its_first_instruction(
    tmp_path: Path, marker: str, clone3: bool
) -> None:
    """``clone3`` starts the command's process in the cgroup; where it is refused (a container's
    seccomp profile), the forked process moves in before it execs. Either way it is in there, and
    so is what it starts."""
    command = f"grep '^0::' /proc/self/cgroup; setsid -f sleep {marker}; echo main-done"
    result = await run_shell(command, cwd=str(tmp_path), env=None, timeout=30, kernel={"clone3": clone3})
    cgroup = result.report["cgroup"]
    if cgroup.startswith("none"):
        pytest.skip(f"no writable cgroup v2 here ({cgroup})")
    if clone3 and result.report["cgroup_entry"] != "clone3":
        pytest.skip("this kernel or its seccomp profile refuses clone3 with CLONE_INTO_CGROUP")
    assert result.report["cgroup_entry"] == ("clone3" if clone3 else "moved")
    assert "cgroup_join" not in result.report  # no error joining it
    membership, said = result.stdout.decode().splitlines()
    assert membership.startswith("0::/")
    assert membership.endswith(f"/{os.path.basename(cgroup)}")
    assert said == "main-done"
    assert result.returncode == 0
    # The detached sleep is killed with the cgroup. (Not counted: a process cgroup.kill has
    # signalled may not have exited yet when the reaper looks, and is then counted as a leftover.)
    assert wait_for_processes(marker, present=False) == []
    assert not os.path.exists(cgroup)


async def test_a_killed_reaper_leaves_nothing_where_it_had_a_cgroup(tmp_path: Path, marker: str) -> None:
    probe = await run_shell("true", cwd=str(tmp_path), env=None, timeout=30)
    if probe.report["cgroup"].startswith("none"):
        pytest.skip(f"no writable cgroup v2 here ({probe.report['cgroup']})")
    result: dict[str, CommandResult] = {}

    async def run() -> None:
        result["value"] = await run_shell(
            f"setsid -f sleep {marker}; sleep {marker}", cwd=str(tmp_path), env=None, timeout=120
        )

    async with anyio.create_task_group() as group:
        group.start_soon(run)
        await anyio.to_thread.run_sync(lambda: wait_for_count(marker, 2))  # the orphan and the main sleep
        reaper = reaper_of(processes_with(marker)[0])
        os.kill(reaper, signal.SIGKILL)  # the reaper cannot clean up: the task process must
    assert result["value"].returncode == -signal.SIGKILL
    assert not result["value"].timed_out  # not the 120 s timeout: the orphan holding the pipe died
    assert wait_for_processes(marker, present=False) == []
    assert not os.path.exists(str(cgroup_dir_for(reaper)))


async def test_the_next_command_removes_the_cgroups_of_reapers_killed_outright(tmp_path: Path) -> None:
    # A reaper killed with its task process (the runner's Ctrl-C, kill -9) cannot remove its cgroup.
    probe = await run_shell("true", cwd=str(tmp_path), env=None, timeout=30)
    if probe.report["cgroup"].startswith("none"):
        pytest.skip(f"no writable cgroup v2 here ({probe.report['cgroup']})")
    gone = subprocess.Popen(["true"])
    gone.wait()
    stale, alive = str(cgroup_dir_for(gone.pid)), str(cgroup_dir_for(os.getpid()))
    os.mkdir(stale)
    os.mkdir(alive)  # a cgroup whose reaper (here: this process) still runs is not touched
    try:
        await run_shell("true", cwd=str(tmp_path), env=None, timeout=30)
        assert not os.path.exists(stale)
        assert os.path.isdir(alive)
    finally:
        for path in (stale, alive):
            if os.path.isdir(path):
                os.rmdir(path)


def reaper_of(pid: int) -> int:
    """Walk up from ``pid`` to the reaper process that started it."""
    while pid > 1:
        with open(f"/proc/{pid}/cmdline", "rb") as handle:
            if b"import reaper" in handle.read():
                return pid
        with open(f"/proc/{pid}/stat", encoding="ascii") as handle:
            pid = int(handle.read().rpartition(")")[2].split()[1])
    # A setsid'd orphan is re-parented to the reaper, so this is only reached on a bug.
    raise AssertionError("no reaper above the marked process")


TASK_PROCESS = textwrap.dedent(
    """
    import anyio, sys
    from airflow_provider_agentloom._os.process import CommandResult, run_shell
    command = "setsid -f sleep {marker}; sh -c '(sleep {marker} &)'; sleep {marker}"
    anyio.run(lambda: run_shell(command, cwd=sys.argv[1], env=None, timeout=600))
    """
)


def test_killing_the_task_process_kills_its_commands(tmp_path: Path, marker: str) -> None:
    # The runner kills task processes with SIGKILL on Ctrl-C: their commands must not outlive them.
    task = subprocess.Popen([sys.executable, "-c", TASK_PROCESS.format(marker=marker), str(tmp_path)])
    try:
        wait_for_count(marker, 3)  # the setsid'd sleep, the double-forked one, the main one
        task.kill()
        task.wait(timeout=10)
        assert wait_for_processes(marker, present=False) == []
    finally:
        task.kill()
        task.wait(timeout=10)


async def test_a_command_signalling_its_own_group_does_not_stop_its_reaper(
    tmp_path: Path, marker: str
) -> None:
    # `kill 0` reaches the command's process group, not the reaper: the command dies of SIGTERM
    # (as it did before the reaper) and what it started is still cleaned up.
    result = await run_shell(
        f"setsid -f sleep {marker}; echo before; kill -TERM 0; echo after",
        cwd=str(tmp_path),
        env=None,
        timeout=30,
    )
    assert result.returncode == -signal.SIGTERM
    assert result.stdout == b"before\n"
    assert result.report["stopped"] is False
    assert wait_for_processes(marker, present=False) == []


async def test_a_reaper_started_ahead_runs_the_next_command_in_its_folder_and_environment(
    tmp_path: Path, marker: str
) -> None:
    from airflow_provider_agentloom._os import process as _process

    _process.prestart_reaper()
    spare = _process._spare
    assert spare is not None
    wait_until(
        lambda: waits_on_a_pipe(spare.process.pid), 30, "the reaper started ahead to wait for its spec"
    )
    assert spare.process.poll() is None
    env = {"PATH": os.environ["PATH"], "GREETING": "hi"}
    result = await run_shell(
        f'pwd; echo "$GREETING"; sleep {marker} & echo started', cwd=str(tmp_path), env=env, timeout=30
    )
    assert result.stdout.decode().split() == [str(tmp_path), "hi", "started"]
    assert result.returncode == 0
    assert spare.process.returncode == 0  # this command's reaper was the one started ahead
    assert _process._spare is None
    assert wait_for_processes(marker, present=False) == []  # what it left was killed, as always


async def test_an_unused_reaper_started_ahead_is_ended_and_a_killed_one_is_replaced(tmp_path: Path) -> None:
    from airflow_provider_agentloom._os import process as _process

    _process.prestart_reaper()
    unused = _process._spare
    assert unused is not None
    _process.discard_spare_reaper()
    assert unused.process.returncode is not None  # ended and reaped
    assert _process._spare is None

    _process.prestart_reaper()
    killed = _process._spare
    assert killed is not None
    killed.process.kill()
    killed.process.wait()
    result = await run_shell("echo fresh", cwd=str(tmp_path), env=None, timeout=30)
    assert result.stdout == b"fresh\n"
    assert _process._spare is None


async def test_a_command_in_a_missing_folder_fails_as_a_process_started_there_would(tmp_path: Path) -> None:
    missing = tmp_path / "gone"
    with pytest.raises(FileNotFoundError, match="No such file or directory"):
        await run_shell("true", cwd=str(missing), env=None, timeout=30)
