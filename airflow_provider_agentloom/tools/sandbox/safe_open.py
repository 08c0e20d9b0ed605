"""Open, read and replace files beneath an allowed directory, with no window after the check.

The sandbox checks a path resolved by name; a symbolic link swapped in after that check must not
carry the open outside. So the file is opened from a descriptor of the allowed directory itself:

- with ``openat2(RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS)`` where the kernel has it (Linux 5.6);
- else by walking the path one component at a time with ``O_NOFOLLOW``, resolving each relative
  symbolic link by hand and refusing one that leads above the directory, or an absolute one (as
  ``RESOLVE_BENEATH`` does).

What was opened is then checked again through ``/proc/self/fd``. ``PathEscapeError`` says a path
left the directory while it was opened.
"""

from __future__ import annotations

import errno
import functools
import os
import secrets
import stat
from collections.abc import Iterator
from contextlib import contextmanager

from airflow_provider_agentloom._os import linux as _linux
from airflow_provider_agentloom.exceptions import AgentLoomError
from airflow_provider_agentloom.tools.sandbox.paths import is_under

_BENEATH = _linux.RESOLVE_BENEATH | _linux.RESOLVE_NO_MAGICLINKS
# O_PATH (Linux) opens a directory without needing its read permission; elsewhere, O_RDONLY.
_DIRECTORY = getattr(os, "O_PATH", os.O_RDONLY) | os.O_DIRECTORY | os.O_CLOEXEC
_MAX_LINKS = 40  # as the kernel's own limit
_RETRIES = 8  # openat2 answers EAGAIN when a rename raced a ".." lookup


class PathEscapeError(AgentLoomError):
    """Raised when opening a path beneath a directory would leave that directory."""


@functools.cache
def openat2_available() -> bool:
    """Return True when ``openat2`` works here (a seccomp filter may refuse it with ENOSYS/EPERM)."""
    try:
        os.close(_linux.openat2(-100, "/", _DIRECTORY, 0, _linux.RESOLVE_NO_SYMLINKS))
    except OSError:
        return False
    return True


def read_beneath(root: str, relative: str, *, display: str, use_openat2: bool | None = None) -> bytes:
    """Return the bytes of regular file ``relative`` beneath ``root``; ``display`` names it in errors."""
    parent, name = _split(relative, display)
    root_fd = _open_root(root, display)
    try:
        flags = os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY  # a FIFO must not block the open
        fd = _resolve(root_fd, root, "/".join([*parent, name]), flags, 0, use_openat2)
    except OSError as exc:
        raise OSError(exc.errno, os.strerror(exc.errno or 0), display) from None
    finally:
        os.close(root_fd)
    try:
        _verify(fd, root, display)
        mode = os.fstat(fd).st_mode
        if stat.S_ISDIR(mode):
            raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), display)
        if not stat.S_ISREG(mode):
            raise ValueError(f"{display!r} is not a regular file")
        chunks = []
        while chunk := os.read(fd, 1 << 20):
            chunks.append(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


def replace_beneath(
    root: str, relative: str, data: bytes, *, display: str, use_openat2: bool | None = None
) -> int:
    """Replace (or create) file ``relative`` beneath ``root`` with ``data``; return bytes written.

    Missing parent directories are created one by one from the directory above them. The data goes
    to a new file (``O_EXCL``) in the target's directory, renamed over the target: a hard link or a
    link swapped in never receives it, and readers never see half a file. The old file's permission
    bits are kept.
    """
    parent, name = _split(relative, display)
    with _directory(root, parent, display, create=True, use_openat2=use_openat2) as directory:
        temporary = f".{name[:200]}.{secrets.token_hex(6)}.tmp"
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o666,
                     dir_fd=directory)  # fmt: skip
        try:
            written = _write_all(fd, data)
            _keep_mode(fd, directory, name, display)
            os.close(fd)
            fd = -1
            os.rename(temporary, name, src_dir_fd=directory, dst_dir_fd=directory)
        except BaseException:
            if fd != -1:
                os.close(fd)
            _unlink_quietly(temporary, directory)
            raise
    return written


def _split(relative: str, display: str) -> tuple[list[str], str]:
    parts = [part for part in relative.split("/") if part not in ("", ".")]
    if not parts:
        raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), display)
    return parts[:-1], parts[-1]


def _write_all(fd: int, data: bytes) -> int:
    view, written = memoryview(data), 0
    while written < len(data):
        written += os.write(fd, view[written:])
    return written


def _keep_mode(fd: int, directory: int, name: str, display: str) -> None:
    try:
        old = os.stat(name, dir_fd=directory, follow_symlinks=False)
    except FileNotFoundError:
        return
    if stat.S_ISDIR(old.st_mode):
        raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), display)
    if stat.S_ISREG(old.st_mode):
        os.fchmod(fd, stat.S_IMODE(old.st_mode) & 0o777)


def _unlink_quietly(name: str, directory: int) -> None:
    try:
        os.unlink(name, dir_fd=directory)
    except OSError:
        pass


@contextmanager
def _directory(
    root: str, parts: list[str], display: str, *, create: bool, use_openat2: bool | None
) -> Iterator[int]:
    """Yield a descriptor of directory ``parts`` beneath ``root`` (made when missing and ``create``)."""
    root_fd = _open_root(root, display)
    try:
        fd = root_fd
        for depth in range(len(parts)):
            opened = _subdirectory(root_fd, root, parts, depth, display, create, use_openat2)
            if fd != root_fd:
                os.close(fd)
            fd = opened
        _verify(fd, root, display)
        yield fd
    finally:
        if fd != root_fd:
            os.close(fd)
        os.close(root_fd)


def _open_root(root: str, display: str) -> int:
    """Open the allowed directory itself; it was resolved, so any symbolic link in it is new."""
    try:
        if openat2_available():
            return _linux.openat2(-100, root, _DIRECTORY, 0, _linux.RESOLVE_NO_SYMLINKS)
        fd = os.open("/", _DIRECTORY)
        for part in [p for p in root.split("/") if p]:
            try:
                child = os.open(part, _DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
            finally:
                os.close(fd)
            fd = child
        return fd
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR):
            raise PathEscapeError(f"the allowed directory {root!r} is no longer a directory") from None
        raise OSError(exc.errno, os.strerror(exc.errno or 0), display) from None


def _subdirectory(
    root_fd: int, root: str, parts: list[str], depth: int, display: str, create: bool, use: bool | None
) -> int:
    """Open ``parts[: depth + 1]`` from the root as a directory, making the last one if asked."""
    prefix = "/".join(parts[: depth + 1])
    for attempt in (1, 2):
        try:
            return _resolve(root_fd, root, prefix, _DIRECTORY, 0, use)
        except FileNotFoundError:
            if not create or attempt == 2:
                raise OSError(errno.ENOENT, os.strerror(errno.ENOENT), display) from None
        parent = _resolve(root_fd, root, "/".join(parts[:depth]) or ".", _DIRECTORY, 0, use)
        try:
            os.mkdir(parts[depth], dir_fd=parent)
        except FileExistsError:
            pass
        finally:
            os.close(parent)
    raise AssertionError("unreachable")  # pragma: no cover


def _resolve(root_fd: int, root: str, relative: str, flags: int, mode: int, use: bool | None) -> int:
    """Open ``relative`` from the descriptor of ``root`` without leaving it."""
    if use if use is not None else openat2_available():
        for _ in range(_RETRIES):
            try:
                return _linux.openat2(root_fd, relative, flags, mode, _BENEATH)
            except OSError as exc:
                if exc.errno == errno.EXDEV:
                    raise PathEscapeError(f"{relative!r} leads outside {root!r}") from None
                if exc.errno != errno.EAGAIN:
                    raise OSError(exc.errno, os.strerror(exc.errno or 0)) from None
        raise PathEscapeError(f"{relative!r} kept changing while it was opened")
    return _walk(root_fd, root, relative, flags, mode)


def _walk(root_fd: int, root: str, relative: str, flags: int, mode: int) -> int:
    """``RESOLVE_BENEATH`` by hand: one component at a time, links followed by hand, never above."""
    stack = [os.dup(root_fd)]
    pending = [p for p in relative.split("/") if p]
    links = 0
    try:
        while pending:
            name = pending.pop(0)
            if name == ".":
                continue
            if name == "..":
                if len(stack) == 1:
                    raise PathEscapeError(f"{relative!r} leads above {root!r}")
                os.close(stack.pop())
                continue
            last = not pending
            try:
                fd = os.open(name, (flags if last else _DIRECTORY) | os.O_NOFOLLOW | os.O_CLOEXEC, mode,
                             dir_fd=stack[-1])  # fmt: skip
            except OSError as exc:
                target = _link_target(exc, name, stack[-1])
                links += 1
                if links > _MAX_LINKS:
                    raise OSError(errno.ELOOP, os.strerror(errno.ELOOP)) from None
                pending[:0] = _link_parts(target, root, relative)
                continue
            if last:
                return fd
            stack.append(fd)
        return os.dup(stack[-1])  # "." or a path that ends in ".."
    finally:
        for fd in stack:
            os.close(fd)


def _link_target(error: OSError, name: str, directory: int) -> str:
    """Return the target of ``name`` when ``error`` came from ``O_NOFOLLOW`` on a link; else re-raise."""
    if error.errno in (errno.ELOOP, errno.ENOTDIR, errno.EMLINK):
        try:
            if stat.S_ISLNK(os.stat(name, dir_fd=directory, follow_symlinks=False).st_mode):
                return os.readlink(name, dir_fd=directory)
        except OSError:
            pass
    raise error


def _link_parts(target: str, root: str, relative: str) -> list[str]:
    """The components to walk instead of a link; an absolute target is refused, as openat2 does."""
    if target.startswith("/"):
        raise PathEscapeError(f"{relative!r} holds an absolute link, which may lead outside {root!r}")
    return [p for p in target.split("/") if p]


def _verify(fd: int, root: str, display: str) -> None:
    """Check through ``/proc/self/fd`` that what was opened is beneath ``root``."""
    try:
        opened = os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        return  # no /proc: the open itself is the guarantee
    if not is_under(opened, root):
        raise PathEscapeError(f"{display!r} was opened as {opened!r}, outside {root!r}")
