"""Path and list helpers shared by the sandbox checks and the subworkflow combination."""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable

from airflow_provider_agentloom.tools.sandbox.hosts import HostError, normalize_host

log = logging.getLogger("airflow_provider_agentloom.tools.sandbox.policy")


def resolve_path(base_dir: str, path: str) -> str:
    """Return ``path`` from ``base_dir`` with ``..`` and symbolic links resolved."""
    return os.path.realpath(os.path.join(base_dir, path))


def domain_entry(entry: str) -> str:
    """Normalise an ``allowed_domains`` entry; one that is no host name (``*.x.com``) matches nothing."""
    try:
        return normalize_host(entry)
    except HostError:
        log.warning("allowed_domains entry %r is not a host name and matches no host", entry)
        return entry


def is_under(path: str, root: str) -> bool:
    """Return True when resolved ``path`` is ``root`` or inside it (``/data2`` is not inside ``/data``)."""
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)


def is_under_any(path: str, roots: Iterable[str]) -> bool:
    """Return True when ``path`` is under one of ``roots``."""
    return any(is_under(path, root) for root in roots)
