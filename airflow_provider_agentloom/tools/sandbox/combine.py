"""``combine_sandboxes``: the sandbox a subworkflow runs under (seed page, "Subworkflows")."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from airflow_provider_agentloom.tools.sandbox.paths import domain_entry, is_under, resolve_path
from airflow_provider_agentloom.workflow.models import SandboxConfig

StrPath = str | os.PathLike[str]


def combine_sandboxes(
    parent: SandboxConfig, child: SandboxConfig, *, base_dir: StrPath | None = None
) -> SandboxConfig:
    """Return the sandbox a subworkflow runs under (seed page, "Subworkflows").

    One side disabled: the enabled side's block (both disabled: the child's own). Both enabled:
    what both allow. Paths are resolved from ``base_dir`` (default: the current directory), so the
    result lists absolute paths.
    """
    if not parent.enabled:
        return child.model_copy(deep=True)
    if not child.enabled:
        return parent.model_copy(deep=True)
    base = os.path.abspath(os.fspath(base_dir) if base_dir is not None else os.getcwd())
    readable = _intersect_dirs(_read_dirs(parent, base), _read_dirs(child, base))
    writable = _intersect_dirs(_write_dirs(parent, base), _write_dirs(child, base))
    both = [d for d in readable if d in writable]
    fields: dict[str, Any] = {
        "enabled": True,
        "allowed_commands": [c for c in parent.allowed_commands if c in child.allowed_commands],
        "danger_opt_in": [c for c in parent.danger_opt_in if c in child.danger_opt_in],
        "allowed_paths": both,
        "readable_paths": [d for d in readable if d not in both],
        "writable_paths": [d for d in writable if d not in both],
        "allow_network": parent.allow_network and child.allow_network,
        "allow_internal_webhook_targets": (
            parent.allow_internal_webhook_targets and child.allow_internal_webhook_targets
        ),
        # A parent without allowed_domains refuses internal addresses: a child's list can't open them.
        "deny_internal_hosts": (
            parent.deny_internal_hosts
            or child.deny_internal_hosts
            or (not parent.allowed_domains and bool(child.allowed_domains))
        ),
        "max_write_bytes": _smaller(parent.max_write_bytes, child.max_write_bytes),
    }
    for key, normalise in (("allowed_domains", domain_entry), ("allowed_schemes", str.lower)):
        shared = _intersect_lists(getattr(parent, key), getattr(child, key), normalise)
        if shared is None:
            # Two lists with nothing in common refuse every request.
            fields["allow_network"] = False
            shared = []
        fields[key] = shared
    return SandboxConfig(**fields)


def _read_dirs(config: SandboxConfig, base: str) -> list[str]:
    return [resolve_path(base, p) for p in [*config.allowed_paths, *config.readable_paths]]


def _write_dirs(config: SandboxConfig, base: str) -> list[str]:
    return [resolve_path(base, p) for p in [*config.allowed_paths, *config.writable_paths]]


def _intersect_dirs(first: list[str], second: list[str]) -> list[str]:
    """Directories under both lists: of two nested directories the deeper one; outermost kept."""
    found: list[str] = []
    for a in first:
        for b in second:
            deeper = a if is_under(a, b) else b if is_under(b, a) else None
            if deeper is not None and deeper not in found:
                found.append(deeper)
    return [d for d in found if not any(o != d and is_under(d, o) for o in found)]


def _intersect_lists(
    first: list[str], second: list[str], normalise: Callable[[str], str]
) -> list[str] | None:
    """Entries on both lists; one empty list sets no limit; None when nothing is shared."""
    if not first or not second:
        return list(first or second)
    keys = {normalise(entry) for entry in second}
    shared = [entry for entry in first if normalise(entry) in keys]
    return shared or None


def _smaller(first: int | None, second: int | None) -> int | None:
    if first is None:
        return second
    if second is None:
        return first
    return min(first, second)
