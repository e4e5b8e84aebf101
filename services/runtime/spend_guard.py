"""Every model call of the runtime asks the spend ledger first (`services/tenancy/spend.py`):
a call that would pass the tenant's or its agency's budget is refused before it is sent,
as a `ModelError` of kind `budget_exceeded` that ends the run with the reason."""

from __future__ import annotations

from agency.contracts.events import Usage
from agency.services.llm.assembly import ModelResponse, OnDelta
from agency.services.llm.errors import ModelError
from agency.services.llm.port import ModelRequest, Provider
from agency.services.llm.pricing import PriceTable
from agency.services.tenancy.spend import Spent, estimate_tokens
from agency.services.tenancy.spend_ledger import SpendLedger


def request_chars(request: ModelRequest) -> int:
    """The request's size: its messages (the system prompt among them) and its tools."""
    messages = sum(
        len(m.content) + sum(len(c.name) + len(c.arguments) for c in m.tool_calls)
        for m in request.messages
    )
    tools = sum(len(t.name) + len(t.description) + len(str(t.parameters)) for t in request.tools)
    return messages + tools


class SpendGuard:
    """A `Provider` that refuses a call over budget and passes the others on."""

    def __init__(
        self, provider: Provider, ledger: SpendLedger, prices: PriceTable | None = None
    ) -> None:
        self._provider = provider
        self._ledger = ledger
        self._prices = prices if prices is not None else PriceTable.from_env()

    @property
    def inner(self) -> Provider:
        return self._provider

    def estimate(self, request: ModelRequest) -> Spent:
        tokens = estimate_tokens(request_chars(request))
        return Spent(
            tokens=tokens, usd=self._prices.cost(request.model, Usage(input_tokens=tokens))
        )

    async def complete(
        self, request: ModelRequest, on_delta: OnDelta | None = None
    ) -> ModelResponse:
        if request.tenant:
            reason = await self._ledger.refusal(
                request.tenant, request.agency, self.estimate(request)
            )
            if reason is not None:
                raise ModelError(reason, retryable=False, kind="budget_exceeded")
        return await self._provider.complete(request, on_delta)
