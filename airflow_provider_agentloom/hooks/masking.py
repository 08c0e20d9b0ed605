"""``TaskSecrets``: what one task must never let out — Airflow's registered secrets and redacted state.

A task learns its secrets as it runs: provider keys and connection passwords are registered with
Airflow's log masker when the gateway is built (``hooks._gateway``), Airflow registers the
connections and sensitive variables it reads, and the state the step reads holds the values of
redacted keys (``state_schema`` ``redact: true``, ``AGENTLOOM_REDACT_STATE_KEYS``). ``mask`` always
uses all of them as registered *now*, so a key learnt mid-step is masked from then on.

It is applied where something leaves the step: the output and metadata pushed to XCom, each model
reply (before the reply cache, the tool loop or the output see it), each tool result and tool error
sent back to a model, and the ``--record`` file. The task log is masked by Airflow itself, with the
state's secrets registered here.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from typing import Any

from airflow_provider_agentloom.workflow.models import Workflow
from airflow_provider_agentloom.workflow.redaction import (
    MIN_SECRET_LENGTH,
    SecretMasker,
    redacted_key_patterns,
    state_secrets,
)

log = logging.getLogger(__name__)


class TaskSecrets:
    """The secrets of one task run, and a masker over them.

    :param workflow: the workflow whose ``state_schema`` names the redacted keys.
    :param state: the state the step reads (its redacted values are secrets).
    :param inherited: the redacted values of the enclosing scopes' states (in a subworkflow).
    """

    def __init__(
        self, workflow: Workflow, state: Mapping[str, Any] | None = None, inherited: Iterable[str] = ()
    ) -> None:
        self.key_patterns = redacted_key_patterns(workflow.state_schema)
        self._values = list(dict.fromkeys([*state_secrets(state or {}, self.key_patterns), *inherited]))
        for value in self._values:
            register_secret(value)
        self._masker: SecretMasker | None = None
        self._seen: frozenset[str] = frozenset()

    def masker(self) -> SecretMasker:
        """Return a masker over the state's secrets and every secret Airflow has registered so far."""
        patterns = _airflow_patterns()
        if self._masker is None or patterns != self._seen:
            self._masker = SecretMasker(self._values, patterns=patterns)
            self._seen = patterns
        return self._masker

    def mask(self, value: Any) -> Any:
        """Return a JSON-like ``value`` with every secret replaced by its marker."""
        return self.masker().mask(value)

    def mask_text(self, text: str) -> str:
        """Return ``text`` with every secret replaced by its marker."""
        return self.masker().mask_text(text)


def _airflow_patterns() -> frozenset[str]:
    try:
        from airflow.sdk._shared.secrets_masker import _secrets_masker

        return frozenset(_secrets_masker().patterns)
    except Exception:  # Airflow's masker unavailable: the state's own secrets still apply
        return frozenset()


def register_secret(secret: str) -> None:
    """Let Airflow's log masker hide ``secret`` in the task log (and in rendered fields)."""
    if len(secret) < MIN_SECRET_LENGTH:
        return
    try:
        from airflow.sdk.log import mask_secret

        mask_secret(secret)
    except Exception:  # best effort: outside a task there is no task log to mask
        log.debug("Could not register a secret with Airflow's log masker")
