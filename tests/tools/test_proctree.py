"""``tools._proctree``: the one /proc process-tree code of the reaper, ``tools._process`` and the runner.

Each test starts real processes carrying a marker, kills them through ``_proctree``, and searches
all of ``/proc`` for the marker afterwards: nothing may be left.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap

import pytest
from process_support import processes_with, wait_for_count, wait_for_processes

from airflow_provider_agentloom._os import proctree as _proctree

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="Linux /proc only")

# A child subreaper (as a runner's supervisor and the reaper are) whose command leaves a setsid'd
# process and a double-forked one behind, then kills its own tree without killing itself.
SUBREAPER = textwrap.dedent(
    """
    import json, os, subprocess, sys, time
    from airflow_provider_agentloom._os import linux as _linux
    from airflow_provider_agentloom._os import proctree as _proctree
    marker = sys.argv[1]
    _linux.prctl(_linux.PR_SET_CHILD_SUBREAPER, 1)
    subprocess.Popen(["sh", "-c", f"setsid sleep {marker} & (sleep {marker} &) ; exec sleep {marker}"])
    def shape():
        listed, parents = _proctree.descendants(os.getpid()), [os.getpid()]
        for pid in listed:
            try:
                with open(f"/proc/{pid}/stat", encoding="ascii") as handle:
                    parents.append(int(handle.read().rpartition(")")[2].split()[1]))
            except OSError:  # the subshell, gone as it was read
                return [], [os.getpid()]
        return listed, parents
    # Until the final shape: /proc is read one process at a time, so while the subshell exits its
    # sleep can be read as its child and then the subshell as gone, leaving that sleep unlisted.
    deadline = time.monotonic() + 20
    while True:
        listed, parents = shape()
        if (len(listed) == 3 and parents[1:].count(os.getpid()) == 2) or time.monotonic() > deadline:
            break
        time.sleep(0.02)
    if sys.argv[2] == "kill_tree":
        killed = _proctree.kill_tree(os.getpid(), include_root=False)
    else:
        killed = _proctree.kill_own_tree()
    while True:
        try:
            os.wait()
        except ChildProcessError:
            break
    print(json.dumps({"self": os.getpid(), "listed": listed, "parents": parents[1:], "killed": killed}))
    """
)


def _python(code: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=40, check=False
    )


def _stat_field(pid: int, index: int) -> str:
    with open(f"/proc/{pid}/stat", encoding="ascii") as handle:
        return handle.read().rpartition(")")[2].split()[index]


@pytest.mark.timeout(60)
@pytest.mark.parametrize("how", ["kill_tree", "kill_own_tree"])
def test_a_subreaper_kills_its_detached_and_double_forked_descendants_but_not_itself(
    marker: str, how: str
) -> None:
    done = _python(SUBREAPER, marker, how)
    assert done.returncode == 0, done.stderr  # the caller was never signalled
    seen = json.loads(done.stdout)
    # The command's sleep, the setsid'd one below it and the orphan re-parented to the subreaper.
    assert len(seen["listed"]) == 3, seen
    assert seen["self"] in seen["parents"]  # the orphan
    for pid, parent in zip(seen["listed"], seen["parents"], strict=True):  # parents before children
        assert parent == seen["self"] or seen["listed"].index(parent) < seen["listed"].index(pid)
    assert sorted(seen["killed"]) == sorted(seen["listed"])
    assert wait_for_processes(marker, present=False) == []


@pytest.mark.timeout(30)
def test_kill_tree_kills_the_root_and_every_descendant(marker: str) -> None:
    root = subprocess.Popen(["sh", "-c", f"sleep {marker} & sh -c 'sleep {marker}' & wait"])
    try:
        seen = set(wait_for_count(marker, 3, seconds=10))  # root and two sleeps
        # Listed after `seen`: the tree only grows until it is killed (the inner sh may still be
        # forking its sleep), so everything seen is in it.
        tree = _proctree.descendants(root.pid)
        assert len(tree) >= 2
        assert seen <= {root.pid, *tree}
        for pid in tree:  # each one's parent is listed before it
            parent = int(_stat_field(pid, 1))
            assert parent == root.pid or tree.index(parent) < tree.index(pid)
        killed = _proctree.kill_tree(root.pid)
        assert killed[0] == root.pid
        assert set(tree) <= set(killed)
        assert root.wait(timeout=10) == -signal.SIGKILL
        assert wait_for_processes(marker, present=False) == []
    finally:
        root.kill()
        root.wait()


@pytest.mark.timeout(30)
def test_kill_tree_interrupted_half_way_still_kills_what_it_stopped(
    marker: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A second Ctrl-C raises in the runner's handler while its first one kills the steps' trees:
    what was stopped so far is killed on the way out, not left stopped for good."""
    root = subprocess.Popen(["sh", "-c", f"sleep {marker} & sleep {marker} & wait"])
    try:
        wait_for_count(marker, 3, seconds=10)  # root and two sleeps
        send, stops = _proctree.send_signal, []

        def interrupted_at_the_second_stop(pid: int, signum: int) -> None:
            send(pid, signum)
            if signum == signal.SIGSTOP:
                stops.append(pid)
                if len(stops) == 2:
                    raise KeyboardInterrupt

        monkeypatch.setattr(_proctree, "send_signal", interrupted_at_the_second_stop)
        with pytest.raises(KeyboardInterrupt):
            _proctree.kill_tree(root.pid)
        assert len(stops) == 2  # the root and one sleep were stopped, the other never was
        assert root.wait(timeout=10) == -signal.SIGKILL
        left = {pid: _stat_field(pid, 0) for pid in processes_with(marker)}
        assert "T" not in left.values(), left
    finally:
        root.kill()
        root.wait()


def test_a_process_has_no_descendants_once_it_has_ended_and_no_start_ticks() -> None:
    child = subprocess.Popen(["true"])
    child.wait()
    assert _proctree.descendants(child.pid) == []
    assert _proctree.process_start_ticks(child.pid) is None


def test_start_ticks_and_boot_id_identify_this_process() -> None:
    ticks = _proctree.process_start_ticks(os.getpid())
    assert ticks is not None
    assert ticks == int(_stat_field(os.getpid(), 19))
    assert _proctree.process_start_ticks(os.getpid()) == ticks  # stable for the process's life
    with open("/proc/sys/kernel/random/boot_id", encoding="ascii") as handle:
        assert _proctree.boot_id() == handle.read().strip() != ""


# A subreaper with three sleeps below it that dies (os._exit) right after its killer's first SIGKILL,
# as a runner's supervisor can be killed while it kills its tree.
DIES_HALF_WAY = textwrap.dedent(
    """
    import os, subprocess, sys, time
    from airflow_provider_agentloom._os import linux as _linux
    from airflow_provider_agentloom._os import proctree as _proctree
    marker, how = sys.argv[1], sys.argv[2]
    _linux.prctl(_linux.PR_SET_CHILD_SUBREAPER, 1)
    quiet = subprocess.DEVNULL  # what is left must not hold the test's pipes open
    command = f"sleep {marker} & sleep {marker} & exec sleep {marker}"
    subprocess.Popen(["sh", "-c", command], stdin=quiet, stdout=quiet, stderr=quiet)
    deadline = time.monotonic() + 20
    while len(_proctree.descendants(os.getpid())) < 3 and time.monotonic() < deadline:
        time.sleep(0.02)
    send = _proctree.send_signal
    def send_then_die(pid, signum):
        send(pid, signum)
        if signum == 9:
            os._exit(0)
    _proctree.send_signal = send_then_die
    if how == "kill_tree":
        _proctree.kill_tree(os.getpid(), include_root=False)
    else:
        _proctree.kill_own_tree()
    """
)


@pytest.mark.timeout(60)
@pytest.mark.parametrize(("how", "frozen"), [("kill_tree", True), ("kill_own_tree", False)])
def test_a_killer_that_dies_half_way_leaves_nothing_frozen_only_with_kill_own_tree(
    marker: str, how: str, frozen: bool
) -> None:
    """``kill_tree`` stops first: its killer's death leaves stopped processes that nothing will ever
    wake (the supervisor's old way). ``kill_own_tree`` leaves none: each one left can still act."""
    done = _python(DIES_HALF_WAY, marker, how)
    assert done.returncode == 0, done.stderr
    left = processes_with(marker)
    assert len(left) >= 2, left  # the killer died after one SIGKILL
    states = {pid: _stat_field(pid, 0) for pid in left}
    assert any(state == "T" for state in states.values()) is frozen, states
