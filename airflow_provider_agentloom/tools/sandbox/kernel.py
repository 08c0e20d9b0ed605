"""The kernel layer of ``shell_command``: the ``kernel_sandbox`` mode and the Landlock plan of a sandbox.

The plan is what the reaper (``_os/reaper.py``) enforces on the command with Landlock, and
whether it gets a network namespace of its own. It is built from the sandbox's lists and adds only
what a program needs to start; see "Kernel layer" in docs/explanation/sandbox-internals.md for what
it grants and why.
"""

from __future__ import annotations

import functools
import logging
import os
import shutil
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, Protocol

from airflow_provider_agentloom._os import linux as ll
from airflow_provider_agentloom.exceptions import KernelSandboxError

if TYPE_CHECKING:
    from airflow_provider_agentloom.workflow.models import SandboxConfig

log = logging.getLogger("airflow_provider_agentloom.tools.sandbox.policy")

KernelSandboxMode = Literal["auto", "required", "off"]
MODES: tuple[KernelSandboxMode, ...] = ("auto", "required", "off")
ENVIRONMENT_VARIABLE = "AGENTLOOM_KERNEL_SANDBOX"

READ = ll.FS_READ_FILE | ll.FS_READ_DIR


class PlannedSandbox(Protocol):
    """What the plan reads of a sandbox (``policy.ToolSandbox``'s lists): named here, not imported,
    so the policy can import this module and this module never imports the policy."""

    @property
    def enabled(self) -> bool: ...

    @property
    def kernel_sandbox(self) -> KernelSandboxMode: ...

    @property
    def config(self) -> SandboxConfig: ...

    @property
    def readable_dirs(self) -> Sequence[str]: ...

    @property
    def writable_dirs(self) -> Sequence[str]: ...


EXECUTE = READ | ll.FS_EXECUTE
WRITE = (
    ll.FS_WRITE_FILE
    | ll.FS_REMOVE_DIR
    | ll.FS_REMOVE_FILE
    | ll.FS_MAKE_DIR
    | ll.FS_MAKE_REG
    | ll.FS_MAKE_SOCK
    | ll.FS_MAKE_FIFO
    | ll.FS_MAKE_SYM
    | ll.FS_REFER
    | ll.FS_TRUNCATE
)
_DEVICE_RW = ll.FS_READ_FILE | ll.FS_WRITE_FILE | ll.FS_TRUNCATE

#: Where programs, their libraries and the dynamic loader live (read and execute).
SYSTEM_DIRECTORIES = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
#: What the dynamic loader and libc read at start-up; nothing else of /etc (no passwd, no group).
LOADER_FILES = ("/etc/ld.so.cache", "/etc/ld.so.conf", "/etc/ld.so.conf.d", "/etc/ld.so.preload")
#: With allow_network: true, name resolution and TLS trust too.
NETWORK_FILES = (
    "/etc/resolv.conf",
    "/etc/hosts",
    "/etc/nsswitch.conf",
    "/etc/gai.conf",
    "/etc/host.conf",
    "/etc/services",
    "/etc/protocols",
    "/etc/ssl",
    "/etc/pki",
    "/etc/ca-certificates",
)
_DEVICES = (("/dev/null", _DEVICE_RW), ("/dev/zero", _DEVICE_RW), ("/dev/full", _DEVICE_RW))
_RANDOM = ("/dev/random", "/dev/urandom")
_TIME_FILES = ("/etc/localtime",)
_PREFIX_LIBRARIES = ("lib", "lib64", "libexec")

_logged: set[str] = set()


def parse_mode(value: object, source: str) -> KernelSandboxMode:
    """Return ``value`` as a mode; raise ``ValueError`` naming ``source`` and the expected values."""
    text = value.strip().lower() if isinstance(value, str) else value
    if text not in MODES:
        raise ValueError(f"{source}: expected one of auto, required, off; got {value!r}")
    return text


def mode_from_environment() -> KernelSandboxMode | None:
    """Return the mode ``AGENTLOOM_KERNEL_SANDBOX`` sets, or None when it is unset or empty."""
    value = os.environ.get(ENVIRONMENT_VARIABLE, "")
    return parse_mode(value, ENVIRONMENT_VARIABLE) if value.strip() else None


@functools.cache
def landlock_abi() -> tuple[int, str]:
    """Return this kernel's Landlock ABI (0: none) and why there is none; probed once per process."""
    return ll.landlock_abi()


@dataclass(frozen=True)
class KernelPlan:
    """What the reaper applies to one command: a Landlock ruleset and/or a network namespace."""

    required: bool
    landlock: dict[str, Any] | None
    netns: bool
    abi: int = 0
    rules: tuple[tuple[str, int], ...] = field(default=(), repr=False)


def plan_for(sandbox: PlannedSandbox, env: Mapping[str, str]) -> KernelPlan | None:
    """Return the kernel layer of a command under ``sandbox``, or None (disabled, or ``off``).

    Under ``required`` a kernel without Landlock raises ``KernelSandboxError`` before anything runs;
    under ``auto`` it is logged once per process and the command runs with the string checks only.
    """
    if not sandbox.enabled or sandbox.kernel_sandbox == "off":
        return None
    required = sandbox.kernel_sandbox == "required"
    netns = not sandbox.config.allow_network
    abi, why = landlock_abi()
    if abi == 0:
        unavailable(f"Landlock is unavailable: {why}", required=required)
        return KernelPlan(required=required, landlock=None, netns=netns)
    rules = tuple(_rules(sandbox, env.get("PATH", "")))
    plan = {
        "handled_fs": _handled_fs(abi),
        "handled_net": ll.NET_BIND_TCP | ll.NET_CONNECT_TCP if netns and abi >= 4 else 0,
        "scoped": _scoped(abi, netns),
        "rules": [[path, access & _handled_fs(abi)] for path, access in rules],
    }
    return KernelPlan(required=required, landlock=plan, netns=netns, abi=abi, rules=rules)


def check_report(plan: KernelPlan, report: Mapping[str, Any]) -> None:
    """Act on what the reaper says it applied: raise when it refused, log once what it could not do."""
    refused = report.get("refused")
    kernel = report.get("kernel") or {}
    if refused:
        details = "; ".join(f"{name}: {kernel.get(name, 'not applied')}" for name in refused)
        unavailable(f"the kernel layer could not be applied ({details})", required=True)
    for name, outcome in sorted(kernel.items()):
        if isinstance(outcome, str) and outcome.startswith("error"):
            unavailable(f"{name} could not be applied ({outcome})", required=plan.required)


def unavailable(reason: str, *, required: bool) -> None:
    """Refuse (``required``) or log once per process (``auto``) that part of the layer is missing."""
    if required:
        raise KernelSandboxError(
            f"Sandbox violation (shell_command): kernel_sandbox = required, but {reason}"
        )
    if reason not in _logged:
        _logged.add(reason)
        log.warning("kernel_sandbox = auto: %s; shell_command runs with the sandbox's string checks", reason)


def _handled_fs(abi: int) -> int:
    handled = (1 << 13) - 1  # ABI 1: execute … make_sym
    if abi >= 2:
        handled |= ll.FS_REFER
    if abi >= 3:
        handled |= ll.FS_TRUNCATE
    if abi >= 5:
        handled |= ll.FS_IOCTL_DEV  # handled and granted nowhere: no device ioctls
    return handled


def _scoped(abi: int, netns: bool) -> int:
    if abi < 6:
        return 0
    scoped = ll.SCOPE_SIGNAL  # no signal to a process outside the command (the task, the reaper)
    if netns:
        scoped |= ll.SCOPE_ABSTRACT_UNIX_SOCKET
    return scoped


def _rules(sandbox: PlannedSandbox, path_variable: str) -> Iterable[tuple[str, int]]:
    for directory in SYSTEM_DIRECTORIES:
        yield directory, EXECUTE
    for program_dir in _program_directories(sandbox, path_variable):
        yield program_dir, EXECUTE
        if os.path.basename(program_dir) in ("bin", "sbin"):
            prefix = os.path.dirname(program_dir)
            for name in _PREFIX_LIBRARIES:
                yield os.path.join(prefix, name), EXECUTE
            yield os.path.join(prefix, "pyvenv.cfg"), ll.FS_READ_FILE  # a virtualenv's python
    for name in (*LOADER_FILES, *_TIME_FILES):
        yield name, READ
    if sandbox.config.allow_network:
        for name in NETWORK_FILES:
            yield name, READ
    for device, access in _DEVICES:
        yield device, access
    for device in _RANDOM:
        yield device, ll.FS_READ_FILE
    for directory in sandbox.readable_dirs:
        yield directory, READ
    for directory in sandbox.writable_dirs:
        yield directory, WRITE


def _program_directories(sandbox: PlannedSandbox, path_variable: str) -> list[str]:
    """PATH's absolute directories (and where their links lead), and where each allowed program is."""
    found: list[str] = []
    for entry in path_variable.split(os.pathsep):
        if os.path.isabs(entry):
            found.extend((os.path.normpath(entry), os.path.realpath(entry)))
    for name in sandbox.config.allowed_commands:
        program = shutil.which(name, path=path_variable) if path_variable else None
        if program is not None:
            found.append(os.path.dirname(os.path.realpath(program)))
    return list(dict.fromkeys(found))
