"""The price table: the cost of a call from its model and tokens."""

from __future__ import annotations

from pathlib import Path

import pytest

from agency.contracts.events.base import Usage
from agency.services.llm.pricing import PriceError, PriceTable

MILLION = 1_000_000


def test_a_call_costs_its_tokens_at_the_models_price_per_million() -> None:
    table = PriceTable()
    usage = Usage(input_tokens=MILLION, output_tokens=MILLION // 2)
    assert table.cost("openai:gpt-4.1-mini", usage) == pytest.approx(0.40 + 0.80)
    assert table.cost("gpt-4o", Usage(input_tokens=1000, output_tokens=100)) == pytest.approx(
        0.0025 + 0.001
    )


def test_a_dated_snapshot_costs_what_its_longest_known_family_costs() -> None:
    table = PriceTable()
    usage = Usage(input_tokens=MILLION, output_tokens=0)
    assert table.cost("gpt-4o-mini-2024-07-18", usage) == pytest.approx(0.15)
    assert table.cost("gpt-4o-2024-08-06", usage) == pytest.approx(2.50)
    assert table.cost("gpt-4oo", usage) == 0.0  # a longer name, not a snapshot of gpt-4o


def test_an_unknown_model_costs_nothing() -> None:
    assert PriceTable().cost("fake", Usage(input_tokens=10, output_tokens=10)) == 0.0


def test_a_price_file_adds_and_overrides_models(tmp_path: Path) -> None:
    path = tmp_path / "prices.json"
    path.write_text(
        '{"local-llama": {"input": 0.1, "output": 0.2}, "gpt-4o": {"input": 1, "output": 1}}'
    )
    table = PriceTable.from_file(path)
    usage = Usage(input_tokens=MILLION, output_tokens=MILLION)
    assert table.cost("local-llama", usage) == pytest.approx(0.3)
    assert table.cost("gpt-4o", usage) == pytest.approx(2.0)
    assert table.cost("gpt-4.1", usage) == pytest.approx(10.0)


def test_a_bad_price_file_is_refused_naming_the_file_and_the_problem(tmp_path: Path) -> None:
    path = tmp_path / "prices.json"
    path.write_text('{"m": {"input": 1}}')
    with pytest.raises(PriceError, match=r"prices.json.*output"):
        PriceTable.from_file(path)
    path.write_text("not json")
    with pytest.raises(PriceError, match="not JSON"):
        PriceTable.from_file(path)
