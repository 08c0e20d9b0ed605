"""Another local user cannot take the warm runner's place (issue 20, section 2, item 1).

The runner listened on an abstract socket whose name follows from the uid and the home, and only
the server checked who connected: another user (uid 4242 here) who bound the name first received
the client's whole environment, command line and terminal; ``agentloom run`` exited 0 having
run nothing, and ``run_workflow`` unpickled the squatter's "result". Now the socket is a file in
a folder that is the user's alone, the client checks the folder, the socket file and the uid of
the process serving it before it sends a byte, and nothing is pickled.

Each attack is played by a real process that drops to uid 4242 (the tests run as root) and
writes down everything it receives. The client's environment carries a canary secret. Each test
shows the effect did not happen (no canary, no byte received, no code run, the real run either
ran or failed naming the problem), then, beside it, the same attack with the guard taken away
(patched out in a client process): the canary reaches the squatter, and the command "succeeds"
without running anything.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import pickle  # noqa: TID251 - only to build the squatter's booby-trapped "result" and prove it is live
import shutil
import signal
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from cli_support import CLI, cli_env
from process_support import is_gone, new_marker
from runner_support import CliRun, stop_and_check_nothing_left, wait_for

from airflow_provider_agentloom.runner.warm import protocol

OTHER_USER = 4242

pytestmark = pytest.mark.skipif(os.getuid() != 0, reason="playing another local user needs root (setuid)")

SQUATTER = r"""
import ctypes, hashlib, json, os, socket, struct, sys, time

config = json.loads(sys.argv[1])
# Opened as root, before the switch: the test's folders are root's and closed to uid 4242.
record = os.open(config["record"], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
dirs = {name: os.open(path, os.O_RDONLY | os.O_DIRECTORY) for name, path in config["dirs"].items()}
libc = ctypes.CDLL(None, use_errno=True)


def note(**entry):
    os.write(record, (json.dumps(entry) + "\n").encode())


def become_the_other_user():
    parent = os.getppid()
    os.setgroups([])
    os.setgid(config["uid"])
    os.setuid(config["uid"])
    libc.prctl(4, 1, 0, 0, 0)  # PR_SET_DUMPABLE: /proc/self/fd stays readable to itself
    libc.prctl(1, 9, 0, 0, 0)  # PR_SET_PDEATHSIG, SIGKILL: it never outlives the test
    if os.getppid() != parent:
        os._exit(1)


def attempt(what, action):
    try:
        action()
        note(attempt=what, outcome="done")
    except OSError as exc:
        note(attempt=what, outcome=type(exc).__name__)


listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
if config["mode"] == "inside":
    # A socket file in the victim's own folder, served by uid 4242 (SO_PEERCRED names the uid
    # that called listen()): what a swapped folder or a confused setuid program would give.
    listener.bind(f"/proc/self/fd/{dirs['folder']}/runner.sock")
    become_the_other_user()
elif config["mode"] == "abstract":
    become_the_other_user()
    home = dirs["home"]
    attempt("bind the runner's socket file",
            lambda: socket.socket(socket.AF_UNIX).bind(f"/proc/self/fd/{home}/runner/runner.sock"))
    attempt("plant a file in the runner folder",
            lambda: os.close(os.open("runner/planted", os.O_WRONLY | os.O_CREAT, 0o666, dir_fd=home)))
    # The address the runner used to listen on, which anyone could take first.
    digest = hashlib.sha256(config["home"].encode()).hexdigest()[:24]
    listener.bind(f"\0agentloom-runner-{config['victim']}-{digest}")
elif config["mode"] == "precreated":
    # The victim's home does not exist yet, in a folder everyone may write to (as /tmp): made first.
    become_the_other_user()
    shared = dirs["shared"]
    os.mkdir("home", 0o755, dir_fd=shared)
    os.mkdir("home/runner", 0o700, dir_fd=shared)
    listener.bind(f"/proc/self/fd/{shared}/home/runner/runner.sock")
listener.listen(8)
listener.settimeout(0.5)
note(listening=True, uid=os.getuid())
deadline = time.monotonic() + 600
while time.monotonic() < deadline:
    try:
        connection, _ = listener.accept()
    except TimeoutError:
        continue
    connection.settimeout(10)
    received, fds = b"", 0
    try:
        data, passed, _, _ = socket.recv_fds(connection, 1 << 20, 8)
        received, fds = data, len(passed)
        for fd in passed:
            os.close(fd)
        while len(received) < 4 or len(received) < 4 + struct.unpack("!I", received[:4])[0]:
            chunk = connection.recv(1 << 20)
            if not chunk:
                break
            received += chunk
        if received:  # answer as a runner would: a run process, then its outcome
            for reply in [{"pid": os.getpid()}, *config["replies"]]:
                body = json.dumps(reply).encode()
                connection.sendall(struct.pack("!I", len(body)) + body)
    except OSError as exc:
        note(error=repr(exc))
    note(connection=True, bytes=len(received), fds=fds, text=received[4:].decode(errors="replace"))
    connection.close()
"""

PATCHED_CLIENT = """
import sys
from airflow_provider_agentloom.runner.warm import protocol
guards_off = sys.argv[1].split(",")
if "peer" in guards_off:  # the client's check of the socket file and of the uid serving it
    protocol.check_server = lambda sock, folder_fd, folder: None
if "folder" in guards_off:  # the client's check of the runner folder's owner and mode
    protocol._check_private = lambda fd, folder: None
if "address" in guards_off:  # the former address: the abstract name of the home
    protocol.socket_path = lambda folder_fd: "\\0" + sys.argv[2]
if "home" in guards_off:  # the CLI's check that the home is this user's own
    from airflow_provider_agentloom.runner import private
    private.ensure_private_home = lambda root: None
from airflow_provider_agentloom.cli import main
main(["run", "flow.yaml", "--json"])
"""

API_CLIENT = """
import json, sys
from airflow_provider_agentloom.runner.warm import protocol
if sys.argv[1] == "off":
    protocol.check_server = lambda sock, folder_fd, folder: None
from airflow_provider_agentloom import run_workflow
try:
    result = run_workflow("flow.yaml", daemon=True)
    print(json.dumps({"status": result.status.value}))
except BaseException as exc:
    print(json.dumps({"raised": type(exc).__name__, "message": str(exc)}))
"""


class Squatter:
    """The other user's process: takes an address, writes down all it receives, answers as a runner."""

    def __init__(
        self, tmp_path: Path, mode: str, dirs: dict[str, Path], replies: list[Any] | None = None, **extra: Any
    ) -> None:
        self.record = tmp_path / f"squatter-{mode}.jsonl"
        config = {
            "mode": mode,
            "uid": OTHER_USER,
            "record": str(self.record),
            "dirs": {name: str(path) for name, path in dirs.items()},
            "replies": replies or [{"exit": 0}],
            **extra,
        }
        self.process = subprocess.Popen(
            [sys.executable, "-c", SQUATTER, json.dumps(config)], env={"PATH": os.environ["PATH"]}
        )
        wait_for(lambda: self.process.poll() is not None or "listening" in self.text(), 60, "the squatter")
        assert self.process.poll() is None, f"the squatter ended: {self.text()}"
        assert {"listening": True, "uid": OTHER_USER} in self.entries()

    def text(self) -> str:
        return self.record.read_text() if self.record.exists() else ""

    def entries(self) -> list[dict[str, Any]]:
        return [json.loads(line) for line in self.text().splitlines()]

    def connections(self, count: int = 0) -> list[dict[str, Any]]:
        """The connections it has had (waiting until it has noted ``count`` of them)."""
        wait_for(lambda: len(self._connections()) >= count, 30, f"{count} connection(s) to the squatter")
        return self._connections()

    def _connections(self) -> list[dict[str, Any]]:
        return [entry for entry in self.entries() if entry.get("connection")]

    def stop(self) -> None:
        self.process.kill()
        self.process.wait()


@pytest.fixture
def canary() -> str:
    return f"secret-canary-{new_marker()}"


@pytest.fixture
def victim(tmp_path: Path, canary: str) -> Iterator[dict[str, Any]]:
    """The victim's workflow (it leaves ``ran.txt`` when it really runs), home and marker; at the end,
    the runner a test started is stopped, and no process of it is left."""
    ran = tmp_path / "ran.txt"
    (tmp_path / "flow.yaml").write_text(
        "name: squat\nsteps:\n"
        f"  - {{id: mark, type: tool, tool_name: shell_command, tool_args: {{command: 'echo ran > {ran}'}}}}\n"
    )
    found = {"home": tmp_path / "home", "marker": new_marker(), "ran": ran}
    yield found
    stop_and_check_nothing_left(found["home"], found["marker"])


def _cli(tmp_path: Path, victim: dict[str, Any], canary: str, *guards_off: str, address: str = "") -> CliRun:
    """``agentloom run flow.yaml --json`` of the victim, with a canary secret in its environment;
    with ``guards_off``, a client process whose named checks are patched away."""
    if guards_off:
        program, args = [sys.executable, "-c", PATCHED_CLIENT], [",".join(guards_off), address]
    else:
        program, args = CLI, ["run", "flow.yaml", "--json"]
    return CliRun(
        *args,
        program=program,
        home=victim["home"],
        cwd=tmp_path,
        marker=victim["marker"],
        warm=True,
        sweep=False,
        AIRFLOW_CONN_SQUAT_CANARY=canary,
    )


def _old_address(home: Path) -> str:
    """The abstract socket name the runner of ``home`` used to listen on (without its leading NUL)."""
    return f"agentloom-runner-{os.getuid()}-{hashlib.sha256(str(home.resolve()).encode()).hexdigest()[:24]}"


def test_a_squatter_on_the_former_address_gets_nothing_and_the_run_runs(
    tmp_path: Path, victim: dict[str, Any], canary: str
) -> None:
    """The reported attack: uid 4242 binds the abstract name first. The client no longer goes
    there; the squatter cannot reach the runner folder either. Control: a client pointed at the
    former address, without the check of who serves it, hands the squatter its secrets and
    "succeeds" without running anything."""
    folder_fd = protocol.open_folder(victim["home"], create=True)  # the victim's home, used before
    assert folder_fd is not None
    os.close(folder_fd)
    squatter = Squatter(
        tmp_path, "abstract", {"home": victim["home"]}, home=str(victim["home"].resolve()), victim=os.getuid()
    )
    try:
        with _cli(tmp_path, victim, canary) as run:
            assert run.finish(240) == 0, run.stderr[-3000:]
        assert run.document()["status"] == "success"
        assert victim["ran"].read_text() == "ran\n"  # it ran, for real
        assert {
            "attempt": "bind the runner's socket file",
            "outcome": "PermissionError",
        } in squatter.entries()
        assert {
            "attempt": "plant a file in the runner folder",
            "outcome": "PermissionError",
        } in squatter.entries()
        assert squatter.connections() == []
        assert canary not in squatter.text()

        # Control: the former address, and no check of who serves it.
        victim["ran"].unlink()
        with _cli(
            tmp_path, victim, canary, "address", "peer", address=_old_address(victim["home"])
        ) as stolen:
            assert stolen.finish(60) == 0, stolen.stderr[-3000:]  # "success"...
        assert not victim["ran"].exists()  # ...and nothing ran
        (connection,) = squatter.connections(1)
        assert canary in connection["text"]
        assert connection["fds"] == 3  # the client's standard input, output and error
    finally:
        squatter.stop()


def test_a_socket_in_the_runner_folder_served_by_another_uid_is_refused_before_a_byte_is_sent(
    tmp_path: Path, victim: dict[str, Any], canary: str
) -> None:
    """However a socket of another uid got into the folder, the client asks the kernel who serves
    it (``SO_PEERCRED``) before it sends: the run fails naming the problem, the squatter gets a
    connection and not one byte. Control: the same client without that check."""
    folder_fd = protocol.open_folder(victim["home"], create=True)
    assert folder_fd is not None
    os.close(folder_fd)
    squatter = Squatter(tmp_path, "inside", {"folder": protocol.runner_folder(victim["home"])})
    try:
        with _cli(tmp_path, victim, canary) as run:
            assert run.finish(120) == 1, run.stderr[-3000:]
        assert f"the process serving it runs as uid {OTHER_USER}, not as you" in run.stderr
        assert "nothing was sent" in run.stderr
        assert run.document()["status"] == "failed"
        assert not victim["ran"].exists()
        assert not (victim["home"] / "runner" / "runner.json").exists()  # and no runner was started
        (connection,) = squatter.connections(1)
        assert connection["bytes"] == 0  # connected, checked, closed: not one byte sent
        assert canary not in squatter.text()

        with _cli(tmp_path, victim, canary, "peer") as stolen:
            assert stolen.finish(60) == 0, stolen.stderr[-3000:]
        assert not victim["ran"].exists()
        assert canary in squatter.connections(2)[-1]["text"]
    finally:
        squatter.stop()


def test_a_runner_folder_another_user_made_first_is_refused(
    tmp_path: Path, victim: dict[str, Any], canary: str
) -> None:
    """A home in a folder everyone may write to (``/tmp``), made first by uid 4242 with its runner
    folder and socket: the client refuses the home (the home's owner check comes first; the runner
    folder's own check is the next wall). Control: without the home, folder and server checks, the
    canary goes to the squatter."""
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o1777)
    victim["home"] = shared / "home"
    squatter = Squatter(tmp_path, "precreated", {"shared": shared})
    try:
        with _cli(tmp_path, victim, canary) as run:
            assert run.finish(120) == 1, run.stderr[-3000:]
        assert f"the agentloom home {shared / 'home'} belongs to another user (uid {OTHER_USER}" in run.stderr
        assert "choose a folder of your own" in run.stderr
        assert not victim["ran"].exists()
        assert squatter.connections() == []
        assert canary not in squatter.text()

        with _cli(tmp_path, victim, canary, "home", "folder", "peer") as stolen:
            assert stolen.finish(60) == 0, stolen.stderr[-3000:]
        assert not victim["ran"].exists()
        assert canary in squatter.connections(1)[-1]["text"]
    finally:
        squatter.stop()
        shutil.rmtree(victim["home"])  # the other user's: nothing of the victim's to stop there


class _Trap:
    """Unpickled, it makes a folder: what any code a squatter's pickle names could do."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def __reduce__(self) -> tuple[Any, ...]:
        return (os.mkdir, (str(self.path),))


def test_the_python_api_unpickles_nothing_even_from_a_process_it_was_told_to_trust(
    tmp_path: Path, victim: dict[str, Any], canary: str
) -> None:
    """``run_workflow`` through the runner: refused before sending, as the CLI. Control: without the
    check, the canary reaches the squatter, but its booby-trapped "result" (a pickle that makes a
    folder when read, as the former client read results) is only data now: the call fails
    naming the runner, and the folder is not made. The pickle itself is live: read here, it makes it."""
    pwned = tmp_path / "pwned"
    trap = base64.b64encode(pickle.dumps(_Trap(pwned))).decode()
    folder_fd = protocol.open_folder(victim["home"], create=True)
    assert folder_fd is not None
    os.close(folder_fd)
    squatter = Squatter(
        tmp_path, "inside", {"folder": protocol.runner_folder(victim["home"])}, replies=[{"returned": trap}]
    )
    env = cli_env(
        victim["home"], warm=True, AGENTLOOM_TEST_MARKER=victim["marker"], AIRFLOW_CONN_SQUAT_CANARY=canary
    )
    try:
        for guard in ("on", "off"):
            done = subprocess.run(
                [sys.executable, "-c", API_CLIENT, guard],
                cwd=tmp_path,
                env=env,
                capture_output=True,
                text=True,
                timeout=120,
                check=False,
            )
            assert done.returncode == 0, done.stderr[-3000:]
            outcome = json.loads(done.stdout.strip().splitlines()[-1])
            if guard == "on":
                assert outcome["raised"] == "RunnerNotTrusted", outcome
                assert f"runs as uid {OTHER_USER}" in outcome["message"]
                assert [c["bytes"] for c in squatter.connections(1)] == [0]
                assert canary not in squatter.text()
            else:
                assert outcome["raised"] == "RunnerUnavailable", outcome
                assert "sent a message that cannot be read" in outcome["message"]
                assert canary in squatter.connections(2)[-1]["text"]
            assert not pwned.exists()
            assert not victim["ran"].exists()
    finally:
        squatter.stop()
    pickle.loads(base64.b64decode(trap))  # the control of the trap: read as a pickle, it acts
    assert pwned.is_dir()


def _runner_pid(home: Path) -> int:
    return int(json.loads((home / "runner" / "runner.json").read_text())["pid"])


def _warm_run(tmp_path: Path, victim: dict[str, Any], canary: str) -> int:
    """One real warm run; the runner's pid."""
    with _cli(tmp_path, victim, canary) as run:
        assert run.finish(240) == 0, run.stderr[-3000:]
    return _runner_pid(victim["home"])


def test_the_runner_folder_is_private_and_no_ending_leaves_its_socket_behind(
    tmp_path: Path, victim: dict[str, Any], canary: str
) -> None:
    """The folder is 0700, its files and socket 0600, all the user's. ``agentloom stop`` and a
    SIGTERM remove the socket file; a runner killed outright leaves one, which the next runner
    replaces (and the next client, finding nobody there, does not mistake for a runner)."""
    home = victim["home"]
    folder, sock = home / "runner", home / "runner" / protocol.SOCKET_NAME
    _warm_run(tmp_path, victim, canary)
    status = folder.stat()
    assert (stat.S_IMODE(status.st_mode), status.st_uid) == (0o700, os.getuid())
    assert stat.S_ISSOCK(sock.lstat().st_mode)
    modes = {
        entry.name: (stat.S_IMODE(entry.lstat().st_mode), entry.lstat().st_uid) for entry in folder.iterdir()
    }
    assert modes == {
        name: (0o600, os.getuid())
        for name in ("runner.sock", "runner.json", "runner.log", "socket.lock", "start.lock")
    }

    stop = CliRun("stop", home=home, cwd=tmp_path, marker=victim["marker"], warm=True, sweep=False)
    with stop:
        assert stop.finish(120) == 0, stop.stderr
    assert f"Stopped the warm runner of {home}" in stop.stdout
    assert not sock.exists()
    assert not (folder / "runner.json").exists()

    runner = _warm_run(tmp_path, victim, canary)
    os.kill(runner, signal.SIGTERM)
    wait_for(lambda: is_gone(runner), 60, "the runner to stop on SIGTERM")
    assert not sock.exists()

    runner = _warm_run(tmp_path, victim, canary)
    os.kill(runner, signal.SIGKILL)
    wait_for(lambda: is_gone(runner), 60, "the runner to be killed")
    assert stat.S_ISSOCK(sock.lstat().st_mode)  # nobody could remove it
    assert _warm_run(tmp_path, victim, canary) != runner  # a new runner, on a new socket file
    assert (home / "runner" / "runner.log").read_text().count("Warm runner starting") == 4


def test_the_runner_folder_is_checked_before_use(tmp_path: Path) -> None:
    """What the client and the runner accept as the runner folder: made 0700 (the home too, when
    missing); one of this user's made with the umask by an earlier version is closed to others,
    and when others could write in it, only if all it holds is the user's own files; one of
    another user and a symbolic link are refused."""
    home = tmp_path / "home"
    fd = protocol.open_folder(home, create=True)
    assert fd is not None
    os.close(fd)
    assert stat.S_IMODE(home.stat().st_mode) == 0o700
    folder = protocol.runner_folder(home)
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    assert protocol.open_folder(tmp_path / "nowhere", create=False) is None

    folder.chmod(0o755)
    fd = protocol.open_folder(home, create=False)
    assert fd is not None
    os.close(fd)
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700

    # Others could write in it (umask 002): closed, then each entry must be the user's own file.
    planted = folder / "runner.sock"
    planted.write_text("")
    os.chown(planted, OTHER_USER, OTHER_USER)
    folder.chmod(0o777)
    with pytest.raises(
        protocol.RunnerNotTrusted, match="other users could write in it, and its 'runner.sock'"
    ):
        protocol.open_folder(home, create=False)
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700  # closed first, whatever the verdict
    planted.unlink()
    (folder / "runner.log").symlink_to(tmp_path / "elsewhere")
    folder.chmod(0o775)
    with pytest.raises(protocol.RunnerNotTrusted, match="its 'runner.log' is not a file of yours"):
        protocol.open_folder(home, create=False)
    (folder / "runner.log").unlink()
    (folder / "runner.log").write_text("")
    (folder / "runner.log").chmod(0o664)
    folder.chmod(0o775)
    fd = protocol.open_folder(home, create=False)
    assert fd is not None
    os.close(fd)
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    assert stat.S_IMODE((folder / "runner.log").stat().st_mode) == 0o600

    os.chown(folder, OTHER_USER, OTHER_USER)
    with pytest.raises(protocol.RunnerNotTrusted, match=f"it belongs to uid {OTHER_USER}, not to you"):
        protocol.open_folder(home, create=True)
    os.chown(folder, os.getuid(), os.getgid())

    other = tmp_path / "other-home"
    (other / "real").mkdir(parents=True)
    (other / "runner").symlink_to(other / "real")
    with pytest.raises(protocol.RunnerNotTrusted, match="it is not a folder"):
        protocol.open_folder(other, create=True)
