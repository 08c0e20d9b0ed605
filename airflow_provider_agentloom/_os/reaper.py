"""Supervise one ``shell_command``: start ``sh -c`` under the kernel sandbox, then kill all it left.

``_os/process.py`` starts it in ``python -I -S``: a fresh, single-threaded interpreter (the task
process has threads, so it never forks to run Python code), which imports this file and its
siblings ``linux.py`` and ``proctree.py`` from their folder, not as the package (so their
bytecode is cached: compiling them took 3 ms of every command), and calls :func:`main`. Standard
library only; ``python -I -S reaper.py`` runs it too. The protocol:

- stdin: one ``marshal``-ed dict (the spec: command, environment, working folder, parent pid,
  status descriptor, Landlock plan, network namespace, cgroup, clone3, required), then end of
  file; it may come long after the start (a reaper started ahead of its command). The command
  reads ``/dev/null``. (``marshal``, not ``json``: its import would add a third to the reaper's
  start-up time.)
- stdout and stderr: the command's own, inherited.
- the status descriptor: ``marshal``-ed dicts: what the kernel layer did, then ``{"returncode": N}``.

The reaper is a child subreaper (every orphan of the command is re-parented to it, ``setsid`` or
not) and gets SIGTERM when the task process dies. The command's process starts in the reaper's
cgroup (``clone3`` with ``CLONE_INTO_CGROUP``; where that is refused, it is forked and moves in,
which costs 10-20 ms more). When the command's main process exits, or on SIGTERM, SIGINT or
SIGHUP, it kills every process left: its cgroup at once when it could make one, then each
descendant found in ``/proc``, stopped first, until none is left and each is reaped.
"""

from __future__ import annotations

import errno
import marshal
import os
import sys
import time

# Not typing.TYPE_CHECKING: importing typing alone costs the reaper ~10 ms (type checkers know this).
TYPE_CHECKING = False
if TYPE_CHECKING:
    import signal
    from typing import Any, NoReturn
else:  # the same functions and constants without signal's enum wrappers (enum costs ~2 ms more)
    import _signal as signal

STOP_SIGNALS = frozenset({signal.SIGTERM, signal.SIGINT, signal.SIGHUP})
_WAITED = frozenset({signal.SIGCHLD}) | STOP_SIGNALS
_CGROUP_PREFIX = "agentloom-"
_MAX_KILL_ROUNDS = 2000  # each waits at most 50 ms for a child to die
_MESSAGE_LIMIT = 1000  # a status line stays below PIPE_BUF, so lines never interleave


if TYPE_CHECKING or __package__:
    from airflow_provider_agentloom._os import linux as _linux
else:  # started as the reaper: the package is not importable under -I -S, but this folder's files are
    _HERE = os.path.dirname(os.path.abspath(__file__))
    if sys.path[:1] != [_HERE]:
        sys.path.insert(0, _HERE)
    import linux as _linux  # imported, not read and compiled: its bytecode is cached like any module's


# -------------------------------------------------------------------------------------- cgroups


def cgroup_dir_for(pid: int) -> str | None:
    """Return the cgroup v2 directory the reaper ``pid`` makes under its (our) cgroup, or None."""
    try:
        with open("/proc/self/cgroup", encoding="utf-8") as handle:
            own = next((line[3:].strip() for line in handle if line.startswith("0::")), None)
        with open("/proc/self/mountinfo", encoding="utf-8") as handle:
            mounts = [line.split() for line in handle if " - cgroup2 " in line]
    except OSError:
        return None
    if own is None or not mounts or mounts[0][3] != "/":
        return None
    return os.path.join(mounts[0][4], own.lstrip("/"), f"{_CGROUP_PREFIX}{pid}")


def _make_cgroup() -> tuple[str | None, str]:
    path = cgroup_dir_for(os.getpid())
    if path is None:
        return None, "no cgroup v2 hierarchy"
    try:
        os.mkdir(path, 0o755)
    except OSError as exc:
        return None, f"cannot create {path}: {exc.strerror}"
    _remove_stale_cgroups(os.path.dirname(path))
    if not os.path.exists(os.path.join(path, "cgroup.kill")):  # Linux < 5.14
        remove_cgroup(path)
        return None, "no cgroup.kill (Linux 5.14 or later)"
    return path, ""


def kill_cgroup(path: str) -> None:
    """Kill every process in the cgroup at ``path`` at once (``cgroup.kill``); errors are ignored."""
    try:
        with open(os.path.join(path, "cgroup.kill"), "w", encoding="ascii") as handle:
            handle.write("1")
    except OSError:
        pass


def _remove_stale_cgroups(parent: str) -> None:
    """Remove the empty cgroups of reapers that are gone.

    A reaper killed outright (``kill -9``, or a whole tree killed at once by the runner on Ctrl-C)
    cannot remove its own; the next reaper under the same parent does. A cgroup whose reaper still
    runs is never touched, nor one still holding a process (``rmdir`` refuses it anyway).
    """
    try:
        names = [n for n in os.listdir(parent) if n.startswith(_CGROUP_PREFIX)]
    except OSError:
        return
    for name in names:
        pid = name[len(_CGROUP_PREFIX) :]
        if not pid.isdigit() or os.path.exists(f"/proc/{pid}"):
            continue
        try:
            os.rmdir(os.path.join(parent, name))
        except OSError:
            pass  # still populated (its processes are being killed), or removed by another reaper


def remove_cgroup(path: str) -> None:
    """Remove an emptied cgroup; it may stay busy for a moment after its last process is reaped."""
    for _ in range(100):
        try:
            os.rmdir(path)
            return
        except FileNotFoundError:
            return
        except OSError as exc:
            if exc.errno != errno.EBUSY:
                return
            time.sleep(0.01)


# ---------------------------------------------------------------------------------- the reaper


class _Status:
    """The status descriptor: one ``marshal``-ed dict per write."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        os.set_inheritable(fd, False)  # the command never gets it

    def write(self, **fields: Any) -> None:
        for key, value in fields.items():
            if isinstance(value, str) and len(value) > _MESSAGE_LIMIT:
                fields[key] = value[:_MESSAGE_LIMIT] + "…"
        try:
            os.write(self.fd, marshal.dumps(fields))
        except OSError:
            pass


def _build_ruleset(plan: dict[str, Any]) -> int:
    fd = _linux.landlock_ruleset(plan["handled_fs"], plan["handled_net"], plan["scoped"])
    try:
        for path, access in plan["rules"]:
            _linux.landlock_allow_path(fd, path, access)
    except BaseException:
        os.close(fd)
        raise
    return fd


def _isolate_network() -> str:
    """Enter a new network namespace (only a loopback that is down); return how."""
    try:
        _linux.unshare(_linux.CLONE_NEWNET)
        return "netns"
    except OSError as exc:
        if exc.errno not in (errno.EPERM, errno.EACCES):
            raise
    # Not privileged: a user namespace of our own first, mapping only our own ids.
    uid, gid = os.geteuid(), os.getegid()
    _linux.unshare(_linux.CLONE_NEWUSER | _linux.CLONE_NEWNET)
    for name, text in (("setgroups", "deny"), ("uid_map", f"{uid} {uid} 1"), ("gid_map", f"{gid} {gid} 1")):
        with open(f"/proc/self/{name}", "w", encoding="ascii") as handle:
            handle.write(text)
    return "userns+netns"


def _apply_kernel_layer(spec: dict[str, Any], ruleset: int | None, status: _Status) -> bool:
    """In the child: network namespace, then Landlock; report; return False to refuse the command."""
    report: dict[str, str] = {}
    if spec.get("landlock") and ruleset is None:
        report["landlock"] = spec.get("ruleset_error", "error: no ruleset")
    if spec.get("netns"):
        try:
            report["netns"] = _isolate_network()
        except OSError as exc:
            report["netns"] = f"error: {exc}"
    if ruleset is not None:
        try:
            _linux.landlock_restrict_self(ruleset)
            report["landlock"] = "applied"
        except OSError as exc:
            report["landlock"] = f"error: {exc}"
        os.close(ruleset)
    failed = sorted(key for key, value in report.items() if value.startswith("error"))
    if failed and spec.get("required"):
        status.write(kernel=report, refused=failed)
        return False
    status.write(kernel=report)
    return True


def _fork_into(cgroup: str | None, clone3: bool = True) -> tuple[int, bool]:
    """Fork the command's process, straight into ``cgroup`` where the kernel allows it.

    Return the pid (0 in the child) and whether the child started in the cgroup; if not, it
    joins it itself (a move, which costs the kernel an RCU grace period: 10-20 ms here).
    """
    if cgroup is not None and clone3:
        try:
            fd = os.open(cgroup, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
        except OSError:
            return os.fork(), False
        try:
            return _linux.fork_into_cgroup(fd), True
        except OSError:
            pass
        finally:
            os.close(fd)
    return os.fork(), False


def _child(
    spec: dict[str, Any], shell: str, ruleset: int | None, cgroup: str | None, status: _Status
) -> NoReturn:
    """Become the command: join ``cgroup`` (None: already in it), then the kernel layer, then exec."""
    try:
        _linux.prctl(_linux.PR_SET_PDEATHSIG, signal.SIGKILL)
        if cgroup is not None:
            try:
                with open(os.path.join(cgroup, "cgroup.procs"), "w", encoding="ascii") as handle:
                    handle.write(str(os.getpid()))
            except OSError as exc:
                status.write(cgroup_join=f"error: {exc}")
        if "cwd" in spec:  # a reaper started ahead of its command starts in its own folder
            os.chdir(spec["cwd"])
        # A process group of its own: `kill 0` in the command must not reach the reaper.
        os.setpgid(0, 0)
        devnull = os.open(os.devnull, os.O_RDONLY)
        os.dup2(devnull, 0)
        os.close(devnull)
        if not _apply_kernel_layer(spec, ruleset, status):
            os._exit(126)
        # Python ignores SIGPIPE and SIGXFSZ and we block the waited signals: sh gets the defaults.
        for signum in (signal.SIGPIPE, signal.SIGXFSZ):
            signal.signal(signum, signal.SIG_DFL)
        signal.pthread_sigmask(signal.SIG_SETMASK, set())
        os.execve(shell, ["sh", "-c", spec["command"]], spec["env"])
    except BaseException as exc:
        status.write(error=f"{type(exc).__name__}: {exc}")
    os._exit(127)


def _find_program(name: str, path: str) -> str | None:
    for directory in path.split(os.pathsep):
        candidate = os.path.join(directory or ".", name)
        if os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return candidate
    return None


def _reap(main_pid: int) -> int | None:
    """Reap every child that exited; return the main process's wait status if it was one of them."""
    found: int | None = None
    while True:
        try:
            pid, wait_status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return found
        if pid == 0:
            return found
        if pid == main_pid:
            found = wait_status


def _supervise(main_pid: int) -> tuple[int | None, bool]:
    """Wait for the main process; return its exit code (None if stopped first) and whether stopped."""
    while True:
        info = signal.sigwaitinfo(_WAITED)
        wait_status = _reap(main_pid)
        if wait_status is not None:
            return os.waitstatus_to_exitcode(wait_status), info.si_signo in STOP_SIGNALS
        if info.si_signo in STOP_SIGNALS:
            return None, True


def _has_children() -> bool:
    try:
        os.waitid(os.P_ALL, 0, os.WEXITED | os.WNOHANG | os.WNOWAIT)
    except ChildProcessError:
        return False
    return True


def _kill_tree() -> list[int]:
    """Stop, then kill, every process below this one; return their pids.

    ``_proctree`` is loaded on the first call only: most commands leave no process behind, and
    loading it would add 3% to the reaper's start-up.
    """
    if TYPE_CHECKING or __package__:
        from airflow_provider_agentloom._os import proctree as _proctree
    else:
        import proctree as _proctree
    return _proctree.kill_tree(os.getpid(), include_root=False)


def kill_descendants(cgroup: str | None, main_pid: int = -1) -> tuple[int, int | None]:
    """Kill and reap every process below this one.

    Returns how many were still running, and the main process's exit code if it was reaped here.
    """
    if cgroup is not None:
        kill_cgroup(cgroup)
    killed: set[int] = set()
    main_status: int | None = None
    for _ in range(_MAX_KILL_ROUNDS):
        reaped = _reap(main_pid)
        main_status = reaped if reaped is not None else main_status
        if not _has_children():  # every orphan is re-parented to us: no child, no descendant
            break
        killed.update(_kill_tree())
        signal.sigtimedwait({signal.SIGCHLD}, 0.05)
    return len(killed), None if main_status is None else os.waitstatus_to_exitcode(main_status)


def main() -> int:
    """Run the spec read from stdin; always kill what the command left before returning."""
    signal.pthread_sigmask(signal.SIG_BLOCK, _WAITED)
    _linux.prctl(_linux.PR_SET_CHILD_SUBREAPER, 1)
    _linux.prctl(_linux.PR_SET_PDEATHSIG, signal.SIGTERM)
    try:
        spec = marshal.loads(sys.stdin.buffer.read())
    except (EOFError, ValueError, TypeError):
        spec = None
    if not isinstance(spec, dict) or os.getppid() != spec.get("parent"):
        return 1  # the task process died, or gave up, before it sent the whole spec
    status = _Status(spec["status_fd"])
    cgroup, why = _make_cgroup() if spec.get("cgroup") else (None, "not asked")
    status.write(cgroup=cgroup or f"none: {why}")
    ruleset: int | None = None
    if spec.get("landlock"):
        try:
            ruleset = _build_ruleset(spec["landlock"])
        except OSError as exc:
            if spec.get("required"):
                status.write(kernel={"landlock": f"error: {exc}"}, refused=["landlock"])
                _finish(cgroup)
                return 0
            spec["ruleset_error"] = f"error: {exc}"  # the child reports it with the rest
    # Found before the fork: once Landlock applies, Python's own files may no longer be readable.
    shell = _find_program("sh", spec["env"].get("PATH", os.defpath))
    if shell is None:
        status.write(error="FileNotFoundError: [Errno 2] No such file or directory: 'sh' (not on PATH)")
        _finish(cgroup)
        return 0
    pid, started_in_cgroup = _fork_into(cgroup, spec.get("clone3", True))
    if pid == 0:
        _child(spec, shell, ruleset, None if started_in_cgroup else cgroup, status)
    if cgroup is not None:
        status.write(cgroup_entry="clone3" if started_in_cgroup else "moved")
    if ruleset is not None:
        os.close(ruleset)
    returncode, stopped = _supervise(pid)
    leftovers, killed_main = _finish(cgroup, pid)
    returncode = killed_main if returncode is None else returncode
    status.write(returncode=returncode, stopped=stopped, leftovers=leftovers)
    return 0


def _finish(cgroup: str | None, main_pid: int = -1) -> tuple[int, int | None]:
    result = kill_descendants(cgroup, main_pid)
    if cgroup is not None:
        remove_cgroup(cgroup)
    return result


if __name__ == "__main__":
    sys.exit(main())
