"""``ToolSandbox``: what the built-in tools may run, read, write and reach (seed page, "The sandbox")."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterable
from pathlib import Path

from airflow_provider_agentloom.exceptions import KernelSandboxError, SandboxViolationError
from airflow_provider_agentloom.tools.sandbox import safe_open as _safe_open
from airflow_provider_agentloom.tools.sandbox.combine import combine_sandboxes
from airflow_provider_agentloom.tools.sandbox.commands import (
    find_expansion,
    find_operator,
    launcher_name,
    path_candidates,
    split_words,
)
from airflow_provider_agentloom.tools.sandbox.hosts import (
    WEB_SCHEMES,
    HostError,
    NetworkTarget,
    Resolver,
    is_internal,
    is_localhost_name,
    parse_ip,
    scheme_of,
    split_url,
    system_resolver,
)
from airflow_provider_agentloom.tools.sandbox.kernel import (
    KernelSandboxMode,
    mode_from_environment,
    parse_mode,
)
from airflow_provider_agentloom.tools.sandbox.paths import domain_entry, is_under, is_under_any, resolve_path
from airflow_provider_agentloom.workflow.models import SandboxConfig

__all__ = [
    "KernelSandboxError",
    "KernelSandboxMode",
    "NetworkTarget",
    "Resolver",
    "SandboxViolationError",
    "ToolSandbox",
    "combine_sandboxes",
    "system_resolver",
]

StrPath = str | os.PathLike[str]


def _violation(tool: str, reason: str) -> SandboxViolationError:
    return SandboxViolationError(f"Sandbox violation ({tool}): {reason}")


class ToolSandbox:
    """The checks the built-in tools run before they act; a custom tool may call them too.

    Takes exactly the fields of ``config.sandbox``, so ``ToolSandbox(**sandbox.model_dump())`` works.
    Every refusal raises ``SandboxViolationError("Sandbox violation (<tool>): <reason>")``.

    :param base_dir: the directory you run from: relative paths, ``cwd`` and the path lists start
        there. Defaults to the current directory when the sandbox is built; the lists are resolved
        (``..`` and symbolic links) at that moment.
    :param resolver: turns a host name into IP addresses; defaults to the system resolver. Tests pass
        their own so that no real DNS is used.
    :param kernel_sandbox: the kernel layer of ``shell_command`` (Landlock and a network namespace)
        under an enabled sandbox: ``auto`` where the kernel allows, ``required`` or ``off``.
        Defaults to ``AGENTLOOM_KERNEL_SANDBOX``, else ``auto``; Airflow tasks pass the provider
        option ``[agentloom] kernel_sandbox``.
    """

    def __init__(
        self,
        *,
        enabled: bool = False,
        allowed_commands: Iterable[str] = (),
        allowed_paths: Iterable[str] = (),
        readable_paths: Iterable[str] = (),
        writable_paths: Iterable[str] = (),
        allow_network: bool = True,
        allowed_domains: Iterable[str] = (),
        allowed_schemes: Iterable[str] = WEB_SCHEMES,
        max_write_bytes: int | None = None,
        danger_opt_in: Iterable[str] = (),
        allow_internal_webhook_targets: bool = False,
        deny_internal_hosts: bool = False,
        base_dir: StrPath | None = None,
        resolver: Resolver | None = None,
        kernel_sandbox: KernelSandboxMode | None = None,
    ) -> None:
        self.kernel_sandbox: KernelSandboxMode = (
            parse_mode(kernel_sandbox, "kernel_sandbox")
            if kernel_sandbox is not None
            else mode_from_environment() or "auto"
        )
        self.config = SandboxConfig(
            enabled=enabled,
            allowed_commands=list(allowed_commands),
            allowed_paths=list(allowed_paths),
            readable_paths=list(readable_paths),
            writable_paths=list(writable_paths),
            allow_network=allow_network,
            allowed_domains=list(allowed_domains),
            allowed_schemes=list(allowed_schemes),
            max_write_bytes=max_write_bytes,
            danger_opt_in=list(danger_opt_in),
            allow_internal_webhook_targets=allow_internal_webhook_targets,
            deny_internal_hosts=deny_internal_hosts,
        )
        self.base_dir = os.path.abspath(os.fspath(base_dir) if base_dir is not None else os.getcwd())
        self.resolver: Resolver = resolver or system_resolver
        cfg = self.config
        allowed = tuple(resolve_path(self.base_dir, p) for p in cfg.allowed_paths)
        self.readable_dirs = allowed + tuple(resolve_path(self.base_dir, p) for p in cfg.readable_paths)
        self.writable_dirs = allowed + tuple(resolve_path(self.base_dir, p) for p in cfg.writable_paths)
        self._commands = frozenset(cfg.allowed_commands)
        self._danger_opt_in = frozenset(cfg.danger_opt_in)
        self._domains = frozenset(domain_entry(d) for d in cfg.allowed_domains)
        # An empty allowed_schemes sets no limit (seed page, "Subworkflows"); only http(s) ever work.
        self._schemes = frozenset(s.lower() for s in cfg.allowed_schemes) or frozenset(WEB_SCHEMES)

    @classmethod
    def from_config(
        cls,
        config: SandboxConfig,
        *,
        base_dir: StrPath | None = None,
        resolver: Resolver | None = None,
        kernel_sandbox: KernelSandboxMode | None = None,
    ) -> ToolSandbox:
        """Build the sandbox of a workflow's ``config.sandbox`` block."""
        return cls(**config.model_dump(), base_dir=base_dir, resolver=resolver, kernel_sandbox=kernel_sandbox)

    @property
    def enabled(self) -> bool:
        """Return True when the checks are on (``enabled: true``)."""
        return self.config.enabled

    def __repr__(self) -> str:
        return f"<ToolSandbox enabled={self.enabled} base_dir={self.base_dir!r}>"

    # ------------------------------------------------------------------ files

    def validate_path(self, path: StrPath, writable: bool = False, tool_name: str = "file_read") -> Path:
        """Check that ``path`` may be read (or written) and return it resolved from ``base_dir``.

        With the sandbox enabled the path is resolved (``..`` and symbolic links) before the check:
        reads must land under ``allowed_paths`` or ``readable_paths``, writes under ``allowed_paths``
        or ``writable_paths``; with no path lists nothing may be read or written.
        """
        text = self._path_text(path, tool_name)
        if not self.enabled:
            return Path(os.path.abspath(os.path.join(self.base_dir, text)))
        try:
            resolved = resolve_path(self.base_dir, text)
        except OSError as exc:  # a link replaced while realpath read it
            raise _violation(
                tool_name, f"path {text!r} changed while it was resolved ({exc.strerror})"
            ) from None
        if not (self.readable_dirs or self.writable_dirs):
            raise _violation(
                tool_name, "no allowed_paths, readable_paths or writable_paths are set: no file access"
            )
        roots = self.writable_dirs if writable else self.readable_dirs
        if not is_under_any(resolved, roots):
            kind = "writable" if writable else "readable"
            where = repr(text) if resolved == text else f"{text!r} (resolved: {resolved!r})"
            hint = ""
            if not writable and is_under_any(resolved, self.writable_dirs):
                hint = "; that directory is only writable"
            raise _violation(tool_name, f"path {where} is outside the {kind} directories{hint}")
        return Path(resolved)

    def validate_write_size(self, size: int, tool_name: str = "file_write") -> None:
        """Check an encoded size against ``max_write_bytes``."""
        limit = self.config.max_write_bytes
        if self.enabled and limit is not None and size > limit:
            raise _violation(tool_name, f"writing {size} bytes exceeds max_write_bytes ({limit})")

    def read_bytes(self, path: StrPath, tool_name: str = "file_read") -> tuple[Path, bytes]:
        """Check ``path`` for reading, then read it with no window for a link swapped in meanwhile.

        Returns the resolved path and the file's bytes. Disabled, it is a plain read.
        """
        resolved = self.validate_path(path, writable=False, tool_name=tool_name)
        if not self.enabled:
            return resolved, resolved.read_bytes()
        root = self._root_of(str(resolved), self.readable_dirs)
        try:
            return resolved, _safe_open.read_beneath(root, self._below(resolved, root), display=str(resolved))
        except _safe_open.PathEscapeError as exc:
            raise self._escaped(tool_name, path, "readable", exc) from None

    def write_bytes(self, path: StrPath, data: bytes, tool_name: str = "file_write") -> tuple[Path, int]:
        """Check ``path`` and ``max_write_bytes``, then replace the file beneath its writable directory.

        Missing parent directories are created. Returns the resolved path and the bytes written.
        Disabled, it is a plain write (parents created, the file truncated in place).
        """
        resolved = self.validate_path(path, writable=True, tool_name=tool_name)
        self.validate_write_size(len(data), tool_name=tool_name)
        if not self.enabled:
            resolved.parent.mkdir(parents=True, exist_ok=True)
            resolved.write_bytes(data)
            return resolved, len(data)
        root = self._root_of(str(resolved), self.writable_dirs)
        try:
            written = _safe_open.replace_beneath(
                root, self._below(resolved, root), data, display=str(resolved)
            )
        except _safe_open.PathEscapeError as exc:
            raise self._escaped(tool_name, path, "writable", exc) from None
        return resolved, written

    @staticmethod
    def _root_of(resolved: str, roots: tuple[str, ...]) -> str:
        """The deepest listed directory holding ``resolved`` (validate_path found at least one)."""
        return max((root for root in roots if is_under(resolved, root)), key=len)

    @staticmethod
    def _below(resolved: Path, root: str) -> str:
        return os.path.relpath(resolved, root)

    @staticmethod
    def _escaped(tool: str, path: StrPath, kind: str, exc: Exception) -> SandboxViolationError:
        return _violation(
            tool,
            f"path {os.fspath(path)!r} changed while it was opened and left the {kind} directories ({exc})",
        )

    @staticmethod
    def _path_text(path: object, tool_name: str) -> str:
        if isinstance(path, os.PathLike):
            path = os.fspath(path)
        if not isinstance(path, str):
            raise _violation(tool_name, f"path must be a string, not {type(path).__name__}")
        if "\x00" in path:
            raise _violation(tool_name, "path contains a NUL character")
        return path

    # --------------------------------------------------------------- commands

    def validate_command(self, command: str, cwd: StrPath = ".") -> None:
        """Check a ``shell_command`` call, in the seed page's order.

        1. the directory; 2. shell operators; 3. shell expansion; 4. the program;
        5. interpreters and launchers; 6. path arguments.
        """
        tool = "shell_command"
        if not self.enabled:
            return
        if not isinstance(command, str):
            raise _violation(tool, f"command must be a string, not {type(command).__name__}")
        directory = self._check_directory(cwd)
        self._check_syntax(command)
        try:
            words = split_words(command)
        except ValueError as exc:
            raise _violation(tool, f"the command cannot be parsed: {exc}") from None
        if not words:
            raise _violation(tool, "the command is empty: there is no program to run")
        self._check_program(words[0], directory)
        self._check_path_arguments(words[1:], directory)

    def _check_directory(self, cwd: StrPath) -> str:
        # Rule 1: cwd under allowed_paths or readable_paths (writable_paths alone does not do).
        text = self._path_text(cwd, "shell_command")
        directory = resolve_path(self.base_dir, text)
        if not is_under_any(directory, self.readable_dirs):
            raise _violation(
                "shell_command",
                f"the working directory {directory!r} is outside allowed_paths and readable_paths",
            )
        return directory

    @staticmethod
    def _check_syntax(command: str) -> None:
        if "\x00" in command:
            raise _violation("shell_command", "the command contains a NUL character")
        operator = find_operator(command)
        if operator is not None:
            raise _violation("shell_command", f"shell operator {operator} is not allowed")
        expansion = find_expansion(command)
        if expansion is not None:
            raise _violation("shell_command", f"shell expansion {expansion} is not allowed")

    def _check_program(self, word: str, directory: str) -> None:
        # Rule 4: the file name must be listed (matching case); a path must be the PATH's file.
        name = os.path.basename(word)
        if name not in self._commands:
            raise _violation("shell_command", f"command {name!r} is not in allowed_commands")
        if "/" in word:
            found = shutil.which(name, path=os.environ.get("PATH", os.defpath))
            given = resolve_path(directory, word)
            if found is None or os.path.realpath(found) != given:
                raise _violation(
                    "shell_command", f"{word!r} is not the {name!r} found on PATH ({found or 'none found'})"
                )
        # Rule 5: interpreters and launchers need danger_opt_in, one by one (our list is longer).
        if launcher_name(name) is not None and name not in self._danger_opt_in:
            raise _violation(
                "shell_command",
                f"{name!r} is an interpreter or launcher that can run anything: "
                "it must be listed in danger_opt_in too",
            )

    def _check_path_arguments(self, words: list[str], directory: str) -> None:
        # Rule 6. Reaching it means cwd passed rule 1, so at least one path list is set.
        roots = self.readable_dirs + self.writable_dirs
        for word in words:
            for candidate in path_candidates(word):
                full = os.path.join(directory, candidate)
                if candidate not in (".", "..") and "/" not in candidate and not os.path.islink(full):
                    continue
                resolved = os.path.realpath(full)
                if not is_under_any(resolved, roots):
                    raise _violation(
                        "shell_command",
                        f"path argument {candidate!r} resolves to {resolved!r}, outside "
                        "allowed_paths, readable_paths and writable_paths",
                    )

    # ---------------------------------------------------------------- network

    def validate_network(self, url: str) -> NetworkTarget:
        """Check an ``http_request`` URL and return where the request may connect.

        With the sandbox disabled nothing is checked and the target is not pinned. Enabled:
        ``allow_network``, ``allowed_schemes``, ``allowed_domains`` (exact, any case), then internal
        addresses, refused without ``allowed_domains`` (or with ``deny_internal_hosts``). A host name
        is resolved once and every address checked; connect to ``addresses`` and nothing else.
        """
        tool = "http_request"
        if not self.enabled:
            return _unchecked_target(url)
        if not self.config.allow_network:
            raise _violation(tool, "network access is disabled (allow_network: false)")
        internal_ok = bool(self._domains) and not self.config.deny_internal_hosts
        return self._check_url(url, tool, self._schemes, self._domains, internal_ok=internal_ok)

    def validate_webhook_url(self, url: str) -> NetworkTarget:
        """Check an approval gate's webhook URL; applies whether or not the sandbox is enabled.

        Internal addresses are refused unless ``allow_internal_webhook_targets``; with the sandbox
        enabled ``allow_network``, ``allowed_schemes`` and ``allowed_domains`` apply too.
        """
        tool = "webhook"
        internal_ok = self.config.allow_internal_webhook_targets
        if not self.enabled:
            return self._check_url(url, tool, frozenset(WEB_SCHEMES), frozenset(), internal_ok=internal_ok)
        if not self.config.allow_network:
            raise _violation(tool, "network access is disabled (allow_network: false)")
        return self._check_url(url, tool, self._schemes, self._domains, internal_ok=internal_ok)

    def validate_attachment_url(self, url: str) -> NetworkTarget:
        """Check an attachment download: ``allow_network``, ``allowed_domains``, no internal addresses.

        Applies whether or not the sandbox is enabled.
        """
        tool = "attachment"
        if not self.config.allow_network:
            raise _violation(tool, "network access is disabled (allow_network: false)")
        return self._check_url(url, tool, frozenset(WEB_SCHEMES), self._domains, internal_ok=False)

    @staticmethod
    def _split(url: object, tool: str, schemes: frozenset[str]) -> tuple[str, str, int]:
        """Check the scheme, then read the host and port (the page's order)."""
        if not isinstance(url, str):
            raise _violation(tool, f"url must be a string, not {type(url).__name__}")
        try:
            scheme = scheme_of(url)
            if scheme not in schemes:
                raise _violation(tool, f"scheme {scheme!r} is not in allowed_schemes")
            if scheme not in WEB_SCHEMES:
                raise _violation(tool, f"scheme {scheme!r} is not supported: only http and https")
            return split_url(url)
        except HostError as exc:
            raise _violation(tool, str(exc)) from None

    def _check_url(
        self,
        url: str,
        tool: str,
        schemes: frozenset[str],
        domains: frozenset[str],
        *,
        internal_ok: bool,
    ) -> NetworkTarget:
        scheme, host, port = self._split(url, tool, schemes)
        if domains and host not in domains:
            raise _violation(tool, f"host {host!r} is not in allowed_domains")
        addresses = self._checked_addresses(host, port, tool, internal_ok=internal_ok)
        return NetworkTarget(url=url, scheme=scheme, host=host, port=port, addresses=addresses)

    def _checked_addresses(self, host: str, port: int, tool: str, *, internal_ok: bool) -> tuple[str, ...]:
        literal = parse_ip(host)
        if literal is not None:
            if not internal_ok and is_internal(literal):
                raise _violation(tool, f"host {host!r} is an internal address ({literal})")
            return (str(literal),)
        if not internal_ok and is_localhost_name(host):
            raise _violation(tool, f"host {host!r} is an internal address")
        found = self._resolve_host(host, port, tool)
        for address in found:
            parsed = parse_ip(address)
            if parsed is None:
                raise _violation(tool, f"host {host!r} resolved to {address!r}, which is not an IP address")
            if not internal_ok and is_internal(parsed):
                raise _violation(tool, f"host {host!r} resolves to the internal address {address}")
        return found

    def _resolve_host(self, host: str, port: int, tool: str) -> tuple[str, ...]:
        try:
            found = tuple(dict.fromkeys(str(a) for a in self.resolver(host, port)))
        except (OSError, UnicodeError) as exc:
            raise _violation(tool, f"host {host!r} does not resolve ({exc})") from None
        if not found:
            raise _violation(tool, f"host {host!r} does not resolve")
        return found


def _unchecked_target(url: str) -> NetworkTarget:
    """Describe a URL the sandbox does not check (disabled): nothing pinned, nothing refused."""
    try:
        scheme, host, port = split_url(url)
    except (HostError, TypeError, AttributeError):
        return NetworkTarget(url=url, scheme="", host="", port=0)
    return NetworkTarget(url=url, scheme=scheme, host=host, port=port)
