"""Model price table (USD per 1K tokens, longest-prefix match) and the cost of one call."""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

import yaml

from airflow_provider_agentloom.llm.types import TokenUsage

__all__ = ["PRICING_ENV", "ModelPrice", "PricingTable", "calculate_cost", "default_pricing"]

PRICING_ENV = "AGENTLOOM_PRICING_FILE"


@dataclass(frozen=True, slots=True)
class ModelPrice:
    """Prices of one model in USD per 1K tokens, and its context window in tokens (None: not listed).

    The context window is what ``plan.cost`` bounds a call's prompt by, before a run.
    """

    input: float
    output: float
    context: int | None = None


class PricingTable:
    """Model prices looked up by longest prefix: ``gpt-4o-mini-2024-07-18`` uses ``gpt-4o-mini``.

    Cost of a call = prompt × input + (completion + reasoning) × output, per 1K tokens; reasoning
    is billed at the output rate and an unknown model costs 0 (reference §3.10).

    :param prices: model name prefix → price.
    """

    def __init__(self, prices: dict[str, ModelPrice] | None = None) -> None:
        self._prices = dict(prices or {})
        self._by_length = sorted(self._prices, key=len, reverse=True)

    @classmethod
    def from_mapping(cls, data: object, *, source: str = "<mapping>") -> PricingTable:
        """Build a table from ``{model: {input: x, output: y, context: n}}``; raise ``ValueError`` naming
        a bad entry (``context``, the context window in tokens, is optional)."""
        if data is None:
            return cls()
        if not isinstance(data, dict):
            raise ValueError(f"{source}: a pricing file must be a mapping of model name to prices")
        prices: dict[str, ModelPrice] = {}
        for name, entry in data.items():
            if not isinstance(entry, dict):
                raise ValueError(f"{source}: {name}: expected a mapping with 'input' and 'output'")
            try:
                price = ModelPrice(float(entry.get("input", 0.0)), float(entry.get("output", 0.0)))
            except (TypeError, ValueError) as exc:
                raise ValueError(f"{source}: {name}: prices must be numbers ({exc})") from None
            if not all(math.isfinite(p) and p >= 0 for p in (price.input, price.output)):
                # A negative price would make a call's cost negative and get around budget_usd.
                raise ValueError(f"{source}: {name}: prices must be finite and not negative")
            context = entry.get("context")
            if context is not None:
                if isinstance(context, bool) or not isinstance(context, int) or context < 1:
                    raise ValueError(
                        f"{source}: {name}: context must be a whole number of tokens (1 or more)"
                    )
                price = ModelPrice(price.input, price.output, context)
            prices[str(name)] = price
        return cls(prices)

    @classmethod
    def from_file(cls, path: str | Path) -> PricingTable:
        """Read a pricing YAML file."""
        with open(path, encoding="utf-8") as handle:
            return cls.from_mapping(yaml.safe_load(handle), source=str(path))

    @classmethod
    def bundled(cls) -> PricingTable:
        """Return the table shipped with the package (``llm/pricing.yaml``)."""
        text = resources.files("airflow_provider_agentloom.llm").joinpath("pricing.yaml").read_text("utf-8")
        return cls.from_mapping(yaml.safe_load(text), source="bundled pricing.yaml")

    @classmethod
    def load(cls, override: str | Path | None = None) -> PricingTable:
        """Return the bundled table overlaid with ``override``, or else with ``$AGENTLOOM_PRICING_FILE``."""
        table = cls.bundled()
        path = override or os.environ.get(PRICING_ENV) or None
        if path:
            table = table.merged(cls.from_file(path))
        return table

    def merged(self, other: PricingTable) -> PricingTable:
        """Return a table with ``other``'s entries taking precedence over this one's.

        An entry of ``other`` without ``context`` keeps this table's window for the same name: an
        override file that only changes prices does not lose the bundled context windows.
        """
        prices = dict(self._prices)
        for name, price in other._prices.items():
            kept = prices.get(name)
            if price.context is None and kept is not None and kept.context is not None:
                price = ModelPrice(price.input, price.output, kept.context)
            prices[name] = price
        return PricingTable(prices)

    def price_for(self, model: str) -> ModelPrice | None:
        """Return the price of the longest listed prefix of ``model`` (``models/`` stripped), or None."""
        name = model.removeprefix("models/")
        for prefix in self._by_length:
            if name.startswith(prefix):
                return self._prices[prefix]
        return None

    def cost(self, model: str, usage: TokenUsage) -> float:
        """Return the USD cost of ``usage`` on ``model`` (0 for an unknown model)."""
        price = self.price_for(model)
        if price is None:
            return 0.0
        billed_output = usage.completion_tokens + usage.reasoning_tokens
        return (usage.prompt_tokens * price.input + billed_output * price.output) / 1000.0

    def __len__(self) -> int:
        return len(self._prices)

    def __contains__(self, model: object) -> bool:
        return model in self._prices


_cache: dict[str, PricingTable] = {}


def default_pricing() -> PricingTable:
    """Return the bundled table plus ``$AGENTLOOM_PRICING_FILE``, read once per value of that variable."""
    key = os.environ.get(PRICING_ENV, "")
    table = _cache.get(key)
    if table is None:
        table = _cache[key] = PricingTable.load(key or None)
    return table


def calculate_cost(model: str, usage: TokenUsage, table: PricingTable | None = None) -> float:
    """Return the USD cost of ``usage`` on ``model`` using ``table`` or the default table."""
    return (table or default_pricing()).cost(model, usage)
