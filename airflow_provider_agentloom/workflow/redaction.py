"""Mask a run's secrets in what it stores or shows, in upstream's ``<REDACTED:sha256=<16 hex>>`` form.

Two kinds of secret are masked:

- **known values**: provider keys, connection passwords, Airflow's registered secrets and the values
  of redacted state keys. Wherever one appears inside a text (a model reply that echoes the key, a
  tool result that prints the environment), that occurrence is replaced by its marker;
- **redacted state keys**: keys matched by a ``state_schema`` pattern with ``redact: true`` or by
  ``AGENTLOOM_REDACT_STATE_KEYS`` (a comma list). Their whole value becomes the marker where a run's
  state is shown (``final_state``); the value itself is a known value everywhere else.

The marker carries a short hash of the secret, so two runs can be compared (the same secret gives
the same marker) without the secret being recoverable. Patterns are ``fnmatch`` globs, matched
case-sensitively against a key's name and its dotted path (upstream's rule).

The in-memory state a step reads stays plain: only copies that leave the step are masked.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Iterable, Mapping
from fnmatch import fnmatchcase
from typing import Any, Protocol, TypeVar

__all__ = [
    "MIN_SECRET_LENGTH",
    "Mask",
    "REDACT_STATE_KEYS_ENV",
    "SecretMasker",
    "inherited_schema",
    "marker",
    "redact_state",
    "redacted_key_patterns",
    "secret_state_keys",
    "state_secrets",
]

REDACT_STATE_KEYS_ENV = "AGENTLOOM_REDACT_STATE_KEYS"
#: Shorter values are not masked as text: ``abc`` would be masked inside every word that holds it.
#: Airflow's own log masker uses the same bound (``[logging] min_length_masked_secret``).
MIN_SECRET_LENGTH = 5

_Value = TypeVar("_Value")


class Mask(Protocol):
    """Returns a JSON-like value with a run's secrets masked (``SecretMasker.mask`` and its callers)."""

    def __call__(self, value: _Value, /) -> _Value: ...


def marker(secret: object) -> str:
    """Return the marker that replaces ``secret``: ``<REDACTED:sha256=`` + 16 hex digits + ``>``."""
    text = secret if isinstance(secret, str) else json.dumps(secret, sort_keys=True, default=str)
    return f"<REDACTED:sha256={hashlib.sha256(text.encode('utf-8')).hexdigest()[:16]}>"


def redacted_key_patterns(
    state_schema: Mapping[str, Any], environ: Mapping[str, str] | None = None
) -> tuple[str, ...]:
    """Return the state-key patterns to redact: ``state_schema``'s ``redact: true`` keys, then the env's."""
    patterns = [key for key, policy in state_schema.items() if getattr(policy, "redact", False)]
    listed = (environ if environ is not None else os.environ).get(REDACT_STATE_KEYS_ENV, "")
    patterns.extend(part.strip() for part in listed.split(",") if part.strip())
    return tuple(dict.fromkeys(patterns))


def inherited_schema(parent: Mapping[str, Any], child: Mapping[str, Any]) -> dict[str, Any]:
    """A child's ``state_schema`` below ``parent``'s: both patterns, and a parent's ``redact: true``
    always wins (a child may redact more, never less)."""
    merged = {**parent, **child}
    for pattern, policy in parent.items():
        if getattr(policy, "redact", False) and not getattr(merged[pattern], "redact", False):
            merged[pattern] = policy
    return merged


def _is_redacted(name: str, path: str, patterns: Iterable[str]) -> bool:
    return any(fnmatchcase(name, p) or fnmatchcase(path, p) for p in patterns)


def redact_state(state: Mapping[str, Any], patterns: Iterable[str]) -> dict[str, Any]:
    """Return a copy of ``state`` whose values under redacted keys (at any depth) are markers."""
    found = tuple(patterns)
    if not found:
        return dict(state)
    return {key: _redact_value(value, str(key), str(key), found) for key, value in state.items()}


def _redact_value(value: Any, name: str, path: str, patterns: tuple[str, ...]) -> Any:
    if _is_redacted(name, path, patterns):
        return marker(value)
    if isinstance(value, Mapping):
        return {k: _redact_value(v, str(k), f"{path}.{k}", patterns) for k, v in value.items()}
    return value


def state_secrets(state: Mapping[str, Any], patterns: Iterable[str]) -> list[str]:
    """Return the texts held under redacted keys of ``state`` (each string inside a matched value)."""
    found = tuple(patterns)
    secrets: list[str] = []
    if found:
        for key, value in state.items():
            _collect(value, str(key), str(key), found, secrets, matched=False)
    return secrets


def _collect(
    value: Any, name: str, path: str, patterns: tuple[str, ...], into: list[str], *, matched: bool
) -> None:
    matched = matched or _is_redacted(name, path, patterns)
    if isinstance(value, Mapping):
        for key, item in value.items():
            _collect(item, str(key), f"{path}.{key}", patterns, into, matched=matched)
    elif isinstance(value, list | tuple):
        for item in value:
            _collect(item, name, path, patterns, into, matched=matched)
    elif matched and value is not None and not isinstance(value, bool):
        into.append(value if isinstance(value, str) else json.dumps(value))


def secret_state_keys(state: Mapping[str, Any], patterns: Iterable[str]) -> list[str]:
    """Return the top-level keys of ``state`` that are redacted or hold a redacted value inside."""
    found = tuple(patterns)
    if not found:
        return []
    return [
        str(key)
        for key, value in state.items()
        if _is_redacted(str(key), str(key), found) or state_secrets({key: value}, found)
    ]


class SecretMasker:
    """Replace every occurrence of a run's known secret values by its marker, in texts and JSON values.

    :param secrets: the secret values (shorter than :data:`MIN_SECRET_LENGTH` are ignored).
    :param patterns: regular expressions matching secrets (Airflow's log masker keeps its registered
        secrets this way); a match is replaced by the marker of the matched text.
    """

    def __init__(self, secrets: Iterable[str] = (), *, patterns: Iterable[str] = ()) -> None:
        self._literals: set[str] = set()
        self._patterns: set[str] = set(patterns)
        self._regex: re.Pattern[str] | None = None
        self.add(*secrets)

    def add(self, *secrets: str) -> None:
        """Mask these values too."""
        fresh = {s for s in secrets if isinstance(s, str) and len(s) >= MIN_SECRET_LENGTH}
        if not fresh <= self._literals:
            self._literals |= fresh
            self._regex = None

    def __bool__(self) -> bool:
        return bool(self._literals or self._patterns)

    def _compiled(self) -> re.Pattern[str] | None:
        if self._regex is None and self:
            # Longest first, so a secret that contains another is masked whole.
            literals = sorted(self._literals, key=len, reverse=True)
            alternatives = [re.escape(s) for s in literals] + sorted(self._patterns, key=len, reverse=True)
            self._regex = re.compile("|".join(alternatives))
        return self._regex

    def mask_text(self, text: str) -> str:
        """Return ``text`` with each secret replaced by its marker."""
        regex = self._compiled()
        if regex is None or not text:
            return text
        return regex.sub(lambda match: marker(match.group(0)), text)

    def mask(self, value: Any) -> Any:
        """Return a copy of a JSON-like ``value`` with every string (keys included) masked."""
        if not self:
            return value
        if isinstance(value, str):
            return self.mask_text(value)
        if isinstance(value, Mapping):
            return {(self.mask_text(k) if isinstance(k, str) else k): self.mask(v) for k, v in value.items()}
        if isinstance(value, list | tuple):
            return [self.mask(item) for item in value]
        return value


def written_secrets(state: Mapping[str, Any], state_schema: Mapping[str, Any]) -> SecretMasker:
    """A masker over the redacted values written in a workflow file: each whole, and each line of one.

    What Airflow shows before a run (the DAG's docs, a task's template fields) goes through it.
    """
    secrets = state_secrets(state, redacted_key_patterns(state_schema))
    return SecretMasker([*secrets, *(line.strip() for text in secrets for line in text.splitlines())])
