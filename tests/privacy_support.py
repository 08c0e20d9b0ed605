"""What another local user could get: modes in a home, reads as uid 4242, command lines, listening sockets.

- :func:`loose_entries` walks a home: each folder must be 0700, each file without a bit for the
  group or other users;
- :func:`read_as_other_user` forks a child that becomes uid/gid :data:`OTHER_UID` (no groups) and
  tries to read paths: it says ``read`` or the error's name (``EACCES``) for each. The paths are
  relative to a folder opened before the switch, so the folders above it (pytest's 0700 ones)
  stand in nothing's way: what decides is the folder itself and what is below it;
- :func:`command_lines` and :func:`listening` read ``/proc``: the command lines of processes,
  and the TCP sockets they listen on (``/proc/net/tcp{,6}`` matched to each process's descriptors).

Standard library only; Linux only; playing another user needs root (the tests skip otherwise).
"""

from __future__ import annotations

import contextlib
import errno
import ipaddress
import os
import stat
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path

OTHER_UID = 4242
"""The other local user."""

_LISTEN = "0A"  # TCP_LISTEN in /proc/net/tcp's "st" column


def can_play_other_user() -> bool:
    return os.geteuid() == 0


def loose_entries(root: Path) -> list[str]:
    """Every folder under ``root`` (itself included) that is not 0700 and every file that has a
    group or other bit, as ``"0755 <path>"``; symbolic links are not followed."""
    found = []
    for entry in [root, *sorted(root.rglob("*"))]:
        info = entry.lstat()
        mode = stat.S_IMODE(info.st_mode)
        if stat.S_ISLNK(info.st_mode):
            continue
        if (mode != 0o700) if stat.S_ISDIR(info.st_mode) else bool(mode & 0o077):
            found.append(f"{mode:04o} {entry}")
    return found


def read_as_other_user(base: Path, paths: Sequence[Path]) -> dict[str, str]:
    """Try to open and read each of ``paths`` (under ``base``) as uid :data:`OTHER_UID`.

    ``base`` must let others through (mode 0711 or wider); return ``{path relative to base:
    "read" | errno name}``.
    """
    relative = [str(path.relative_to(base)) for path in paths]
    base_fd = os.open(base, os.O_RDONLY | os.O_DIRECTORY)
    read_fd, write_fd = os.pipe()
    try:
        pid = os.fork()
        if pid == 0:  # pragma: no cover - the child: system calls only, then _exit
            code = 1
            try:
                os.close(read_fd)
                os.setgroups([])
                os.setgid(OTHER_UID)
                os.setuid(OTHER_UID)
                answers = []
                for path in relative:
                    try:
                        fd = os.open(path, os.O_RDONLY, dir_fd=base_fd)
                        try:
                            os.read(fd, 16)
                        finally:
                            os.close(fd)
                        answers.append("read")
                    except OSError as exc:
                        answers.append(errno.errorcode.get(exc.errno or 0, str(exc.errno)))
                os.write(write_fd, "\n".join(answers).encode())
                code = 0
            finally:
                os._exit(code)
        os.close(write_fd)
        write_fd = -1
        chunks = []
        while chunk := os.read(read_fd, 65536):
            chunks.append(chunk)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0, "the reader running as another user failed"
    finally:
        os.close(base_fd)
        os.close(read_fd)
        if write_fd >= 0:
            os.close(write_fd)
    return dict(zip(relative, b"".join(chunks).decode().split("\n"), strict=True))


@contextlib.contextmanager
def opened_for_others(base: Path) -> Iterator[None]:
    """Let other users through ``base`` (0711: no listing) while inside; its mode is put back after."""
    before = stat.S_IMODE(base.stat().st_mode)
    base.chmod(0o711)
    try:
        yield
    finally:
        base.chmod(before)


def command_lines(pids: Iterable[int]) -> dict[int, bytes]:
    """The command line of each live process of ``pids`` (its arguments joined by NUL bytes)."""
    found = {}
    for pid in pids:
        with contextlib.suppress(OSError):
            found[pid] = Path(f"/proc/{pid}/cmdline").read_bytes()
    return found


def environments(pids: Iterable[int]) -> dict[int, bytes]:
    """The environment of each live process of ``pids`` (``NAME=value`` entries joined by NUL bytes)."""
    found = {}
    for pid in pids:
        with contextlib.suppress(OSError):
            found[pid] = Path(f"/proc/{pid}/environ").read_bytes()
    return found


def _socket_inodes(pid: int) -> set[str]:
    inodes = set()
    with contextlib.suppress(OSError):
        for fd in os.listdir(f"/proc/{pid}/fd"):
            with contextlib.suppress(OSError):
                target = os.readlink(f"/proc/{pid}/fd/{fd}")
                if target.startswith("socket:["):
                    inodes.add(target[len("socket:[") : -1])
    return inodes


def _address(hex_address: str) -> tuple[ipaddress.IPv4Address | ipaddress.IPv6Address, int]:
    host, port = hex_address.split(":")
    raw = bytes.fromhex(host)
    if len(raw) == 4:
        return ipaddress.IPv4Address(raw[::-1]), int(port, 16)
    # /proc/net/tcp6: four 32-bit words, each in the host's (little-endian) order
    words = b"".join(raw[index : index + 4][::-1] for index in range(0, 16, 4))
    return ipaddress.IPv6Address(words), int(port, 16)


def listening(pids: Iterable[int]) -> list[tuple[int, str, int, bool]]:
    """Each TCP socket one of ``pids`` listens on: ``(pid, address, port, on loopback only)``."""
    owners: dict[str, int] = {}
    for pid in pids:
        for inode in _socket_inodes(pid):
            owners[inode] = pid
    found = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with contextlib.suppress(FileNotFoundError), open(table, encoding="ascii") as handle:
            next(handle)  # the header
            for line in handle:
                fields = line.split()
                if fields[3] != _LISTEN or fields[9] not in owners:
                    continue
                address, port = _address(fields[1])
                mapped = getattr(address, "ipv4_mapped", None)
                found.append((owners[fields[9]], str(address), port, (mapped or address).is_loopback))
    return found


def assert_other_user_reads_none(world: Path, secrets: Sequence[Path]) -> None:
    """Uid :data:`OTHER_UID` reads none of ``secrets`` (files under ``world``), beside a control.

    First as they are: every one is EACCES. Then the control: the folders between ``world`` and
    each secret are opened (0755) and a world-readable file is put beside each; the other user
    reads every control file (the reader would see a leak), and still none of the secrets (their
    own 0600 holds without the folders). Modes and files are put back afterwards.
    """
    assert secrets
    with opened_for_others(world):
        answers = read_as_other_user(world, secrets)
        assert set(answers.values()) == {"EACCES"}, answers
        folders = {folder for secret in secrets for folder in secret.parents if world in folder.parents}
        modes = {folder: stat.S_IMODE(folder.stat().st_mode) for folder in folders}
        controls = sorted({secret.parent / "control-world-readable.txt" for secret in secrets})
        try:
            for control in controls:
                control.write_text("anyone may read this\n")
                control.chmod(0o644)
            for folder in folders:
                folder.chmod(0o755)
            answers = read_as_other_user(world, [*controls, *secrets])
        finally:
            for folder, mode in modes.items():
                folder.chmod(mode)
            for control in controls:
                control.unlink()
        assert [answers[str(control.relative_to(world))] for control in controls] == ["read"] * len(controls)
        assert {answers[str(secret.relative_to(world))] for secret in secrets} == {"EACCES"}, answers
