"""Call the Linux system calls we need through ctypes: Landlock, openat2, prctl, unshare, inotify.

Standard library only, and no import of the package: the reaper (``_os/reaper.py``) runs in a
``python -I -S`` process that loads this file by its path. Every function fails with ``OSError``
(``errno`` set) and every probe answers 0 or False on a kernel or platform without the call.
"""

from __future__ import annotations

import ctypes
import errno
import os
import stat
import sys

# The architectures whose system calls are numbered from the generic table (Linux >= 5.1 gave
# every new call one number there: 437 openat2, 444-446 Landlock). Elsewhere we say "unavailable".
_GENERIC_TABLE = frozenset(
    {"x86_64", "amd64", "aarch64", "arm64", "riscv64", "ppc64le", "ppc64", "s390x", "loongarch64"}
)
SYS_CLONE3 = 435
SYS_OPENAT2 = 437
SYS_LANDLOCK_CREATE_RULESET = 444
SYS_LANDLOCK_ADD_RULE = 445
SYS_LANDLOCK_RESTRICT_SELF = 446

# prctl options (linux/prctl.h).
PR_SET_PDEATHSIG = 1
PR_SET_CHILD_SUBREAPER = 36
PR_SET_NO_NEW_PRIVS = 38

# unshare and clone3 flags (linux/sched.h).
CLONE_NEWNET = 0x40000000
CLONE_NEWUSER = 0x10000000
CLONE_INTO_CGROUP = 0x200000000

# inotify (linux/inotify.h): the event watched, and inotify_init1's flags (O_NONBLOCK, O_CLOEXEC).
IN_MODIFY = 0x00000002
IN_NONBLOCK = os.O_NONBLOCK
IN_CLOEXEC = 0o2000000

# openat2 resolve flags (linux/openat2.h).
RESOLVE_NO_MAGICLINKS = 0x02
RESOLVE_NO_SYMLINKS = 0x04
RESOLVE_BENEATH = 0x08

# Landlock (linux/landlock.h): filesystem rights by the ABI that added them.
FS_EXECUTE = 1 << 0
FS_WRITE_FILE = 1 << 1
FS_READ_FILE = 1 << 2
FS_READ_DIR = 1 << 3
FS_REMOVE_DIR = 1 << 4
FS_REMOVE_FILE = 1 << 5
FS_MAKE_CHAR = 1 << 6
FS_MAKE_DIR = 1 << 7
FS_MAKE_REG = 1 << 8
FS_MAKE_SOCK = 1 << 9
FS_MAKE_FIFO = 1 << 10
FS_MAKE_BLOCK = 1 << 11
FS_MAKE_SYM = 1 << 12
FS_REFER = 1 << 13  # ABI 2
FS_TRUNCATE = 1 << 14  # ABI 3
FS_IOCTL_DEV = 1 << 15  # ABI 5
#: The rights a rule on a file (not a directory) may carry.
FS_FILE_RIGHTS = FS_EXECUTE | FS_WRITE_FILE | FS_READ_FILE | FS_TRUNCATE | FS_IOCTL_DEV
NET_BIND_TCP = 1 << 0  # ABI 4
NET_CONNECT_TCP = 1 << 1  # ABI 4
SCOPE_ABSTRACT_UNIX_SOCKET = 1 << 0  # ABI 6
SCOPE_SIGNAL = 1 << 1  # ABI 6
_CREATE_RULESET_VERSION = 1 << 0
_RULE_PATH_BENEATH = 1


class _RulesetAttr(ctypes.Structure):
    _fields_ = (
        ("handled_access_fs", ctypes.c_uint64),
        ("handled_access_net", ctypes.c_uint64),
        ("scoped", ctypes.c_uint64),
    )


class _PathBeneathAttr(ctypes.Structure):
    _pack_ = 1  # __attribute__((packed)) in the kernel header: 12 bytes
    _fields_ = (("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32))


class _CloneArgs(ctypes.Structure):
    _fields_ = tuple(
        (name, ctypes.c_uint64)
        for name in (
            "flags", "pidfd", "child_tid", "parent_tid", "exit_signal", "stack", "stack_size", "tls",
            "set_tid", "set_tid_size", "cgroup",
        )
    )  # fmt: skip


class _OpenHow(ctypes.Structure):
    _fields_ = (("flags", ctypes.c_uint64), ("mode", ctypes.c_uint64), ("resolve", ctypes.c_uint64))


_libc: ctypes.CDLL | None = None


def _c() -> ctypes.CDLL:
    global _libc
    if _libc is None:
        _libc = ctypes.CDLL(None, use_errno=True)
    return _libc


def _check(result: int, what: str) -> int:
    if result == -1:
        code = ctypes.get_errno()
        raise OSError(code, f"{what}: {os.strerror(code)}")
    return result


def has_generic_syscalls() -> bool:
    """Return True on Linux on an architecture whose new system calls have the generic numbers."""
    return sys.platform == "linux" and os.uname().machine.lower() in _GENERIC_TABLE


def _syscall(number: int, *args: object) -> int:
    if not has_generic_syscalls():
        raise OSError(errno.ENOSYS, "not available on this platform")
    return int(_c().syscall(ctypes.c_long(number), *args))


def prctl(option: int, value: int) -> None:
    """Call ``prctl(option, value, 0, 0, 0)``."""
    zero = ctypes.c_ulong(0)
    _check(_c().prctl(ctypes.c_int(option), ctypes.c_ulong(value), zero, zero, zero), "prctl")


def inotify_watch(path: str, mask: int) -> int:
    """A non-blocking inotify descriptor (close-on-exec) watching ``path`` for the ``mask`` events."""
    fd = _check(_c().inotify_init1(ctypes.c_int(IN_NONBLOCK | IN_CLOEXEC)), "inotify_init1")
    try:
        _check(_c().inotify_add_watch(ctypes.c_int(fd), os.fsencode(path), ctypes.c_uint32(mask)), path)
    except BaseException:
        os.close(fd)
        raise
    return fd


def unshare(flags: int) -> None:
    """Call ``unshare(flags)`` (``os.unshare`` exists from Python 3.12 only)."""
    _check(_c().unshare(ctypes.c_int(flags)), "unshare")


def fork_into_cgroup(cgroup_fd: int) -> int:
    """``fork()`` whose child starts in the cgroup open at ``cgroup_fd`` (``clone3`` with
    ``CLONE_INTO_CGROUP``, Linux 5.7); return the child's pid in the parent and 0 in the child.

    No process moves between cgroups, so the kernel does not wait for an RCU grace period as it
    does on each write to ``cgroup.procs`` (10-20 ms here). Python's own fork bookkeeping is
    skipped: only for a single-threaded process whose child runs plain system calls, then execs
    (the reaper). ``OSError`` where ``clone3`` is unavailable or refused (container seccomp
    profiles answer ``ENOSYS``): fork and join the cgroup the usual way then.
    """
    import _signal  # type: ignore[import-not-found]  # signal without its enums (reaper start-up)

    args = _CloneArgs(flags=CLONE_INTO_CGROUP, exit_signal=_signal.SIGCHLD, cgroup=cgroup_fd)
    result = _syscall(SYS_CLONE3, ctypes.byref(args), ctypes.c_size_t(ctypes.sizeof(args)))
    return _check(result, "clone3")


def openat2(dir_fd: int, path: str, flags: int, mode: int, resolve: int) -> int:
    """Open ``path`` from ``dir_fd`` with ``openat2``; return the descriptor (``O_CLOEXEC`` is added)."""
    how = _OpenHow(flags | os.O_CLOEXEC, mode, resolve)
    result = _syscall(
        SYS_OPENAT2, ctypes.c_int(dir_fd), os.fsencode(path), ctypes.byref(how), ctypes.c_size_t(24)
    )
    return _check(result, "openat2")


def landlock_abi() -> tuple[int, str]:
    """Return the kernel's Landlock ABI version (0 when there is none) and why there is none."""
    try:
        version = _syscall(SYS_LANDLOCK_CREATE_RULESET, None, ctypes.c_size_t(0), ctypes.c_uint32(1))
    except OSError as exc:
        return 0, f"Landlock needs Linux on a known architecture ({exc.strerror})"
    if version >= 1:
        return version, ""
    code = ctypes.get_errno()
    if code == errno.ENOSYS:
        return 0, "the kernel was built without Landlock"
    if code == errno.EOPNOTSUPP:
        return 0, "Landlock is disabled at boot (not in the kernel's lsm= list)"
    return 0, f"Landlock is not usable ({os.strerror(code)})"


def landlock_ruleset(handled_fs: int, handled_net: int, scoped: int) -> int:
    """Create a Landlock ruleset handling those rights; return its descriptor."""
    attr = _RulesetAttr(handled_fs, handled_net, scoped)
    size = ctypes.c_size_t(ctypes.sizeof(attr))
    result = _syscall(SYS_LANDLOCK_CREATE_RULESET, ctypes.byref(attr), size, ctypes.c_uint32(0))
    return _check(result, "landlock_create_ruleset")


def landlock_allow_path(ruleset_fd: int, path: str, access: int) -> bool:
    """Allow ``access`` beneath ``path`` (file rights only on a file).

    Returns False, granting nothing, when the path does not exist or cannot be opened: a rule
    left out only denies more.
    """
    try:
        fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        if not stat.S_ISDIR(os.fstat(fd).st_mode):  # fstat works on an O_PATH descriptor
            access &= FS_FILE_RIGHTS
        if not access:
            return False
        attr = _PathBeneathAttr(access, fd)
        result = _syscall(
            SYS_LANDLOCK_ADD_RULE,
            ctypes.c_int(ruleset_fd),
            ctypes.c_int(_RULE_PATH_BENEATH),
            ctypes.byref(attr),
            ctypes.c_uint32(0),
        )
        _check(result, f"landlock_add_rule({path})")
        return True
    finally:
        os.close(fd)


def landlock_restrict_self(ruleset_fd: int) -> None:
    """Enforce the ruleset on this (single-threaded) process and what it runs; sets no_new_privs."""
    prctl(PR_SET_NO_NEW_PRIVS, 1)
    _check(
        _syscall(SYS_LANDLOCK_RESTRICT_SELF, ctypes.c_int(ruleset_fd), ctypes.c_uint32(0)),
        "landlock_restrict_self",
    )
