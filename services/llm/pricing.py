"""What a model call costs: a price table per model, in USD per million tokens.

The defaults are OpenAI's list prices for common models; `AGENCY_PRICES` names a JSON file
that adds or overrides entries (`{"my-model": {"input": 0.5, "output": 1.5}}`). A model is
matched by its exact name, then by the longest known name it starts with, so a dated
snapshot (`gpt-4.1-mini-2025-04-14`) costs what its family costs. A provider prefix
(`openai:`) is ignored. An unknown model costs 0 (and is logged once).

The cost is computed when the call is made and recorded in `model.completed`, so a later
change of prices never rewrites history and every rebuild gives the same totals.
"""

from __future__ import annotations

import os
from decimal import Decimal
from pathlib import Path

import msgspec
import structlog

from agency.contracts.events.base import Usage

log = structlog.get_logger(__name__)

_MILLION = Decimal(1_000_000)


class ModelPrice(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """USD per million input (prompt) and output (completion) tokens."""

    input: float
    output: float


# OpenAI list prices, USD per million tokens.
DEFAULT_PRICES: dict[str, ModelPrice] = {
    "gpt-5": ModelPrice(input=1.25, output=10.0),
    "gpt-5-mini": ModelPrice(input=0.25, output=2.0),
    "gpt-5-nano": ModelPrice(input=0.05, output=0.40),
    "gpt-4.1": ModelPrice(input=2.0, output=8.0),
    "gpt-4.1-mini": ModelPrice(input=0.40, output=1.60),
    "gpt-4.1-nano": ModelPrice(input=0.10, output=0.40),
    "gpt-4o": ModelPrice(input=2.50, output=10.0),
    "gpt-4o-mini": ModelPrice(input=0.15, output=0.60),
    "o1": ModelPrice(input=15.0, output=60.0),
    "o3": ModelPrice(input=2.0, output=8.0),
    "o3-mini": ModelPrice(input=1.10, output=4.40),
    "o4-mini": ModelPrice(input=1.10, output=4.40),
    "gpt-4-turbo": ModelPrice(input=10.0, output=30.0),
    "gpt-3.5-turbo": ModelPrice(input=0.50, output=1.50),
}


class PriceError(Exception):
    def __init__(self, path: Path, problem: str) -> None:
        super().__init__(f"price table {path}: {problem}")


class PriceTable:
    def __init__(self, prices: dict[str, ModelPrice] | None = None) -> None:
        self._prices = dict(DEFAULT_PRICES if prices is None else prices)
        # Longest names first, so "gpt-4o-mini-…" is not priced as "gpt-4o".
        self._by_length = sorted(self._prices, key=len, reverse=True)
        self._unknown: set[str] = set()

    @classmethod
    def from_file(cls, path: Path) -> PriceTable:
        """The defaults, with the file's entries added or replacing them."""
        try:
            extra = msgspec.json.decode(path.read_bytes(), type=dict[str, ModelPrice])
        except OSError as e:
            raise PriceError(path, f"cannot be read: {e}") from e
        except msgspec.ValidationError as e:
            raise PriceError(path, f"{e} (expected {{model: {{input, output}}}})") from e
        except msgspec.DecodeError as e:
            raise PriceError(path, f"is not JSON: {e}") from e
        return cls({**DEFAULT_PRICES, **extra})

    @classmethod
    def from_env(cls) -> PriceTable:
        path = os.environ.get("AGENCY_PRICES")
        return cls.from_file(Path(path)) if path else cls()

    def price(self, model: str) -> ModelPrice | None:
        name = model.partition(":")[2] if ":" in model else model
        if (exact := self._prices.get(name)) is not None:
            return exact
        for known in self._by_length:
            if name.startswith(known + "-"):
                return self._prices[known]
        return None

    def cost(self, model: str, usage: Usage) -> float:
        """USD for a call with this usage, exact to a millionth of a cent."""
        price = self.price(model)
        if price is None:
            if model not in self._unknown:
                self._unknown.add(model)
                log.info("no price for model, counting its calls at 0", model=model)
            return 0.0
        total = (
            Decimal(repr(price.input)) * usage.input_tokens
            + Decimal(repr(price.output)) * usage.output_tokens
        ) / _MILLION
        return float(round(total, 8))
