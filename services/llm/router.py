"""Model calls routed by the provider prefix of their model (`openai:gpt-4.1`,
`ollama:qwen3`): one `OpenAIProvider`, and so one HTTP client and one concurrency
limit, per configured provider (`services/llm/catalog.py`). Offline (no provider
configured), the fake model at `fake_url` answers every known provider.

A tenant's own settings of a provider (`services/llm/tenant_models.py`) serve its runs
before the operator's, each on a client of its own; where the operator forbids the
fallback, a tenant without settings of its own for a provider gets none."""

from __future__ import annotations

import asyncio
import hashlib
from dataclasses import replace
from typing import Self

from agency.services.egress import EgressPolicy, guarded_transport
from agency.services.llm.assembly import ModelResponse, OnDelta
from agency.services.llm.catalog import ProviderCatalog
from agency.services.llm.errors import ModelConfigError
from agency.services.llm.port import ModelRequest
from agency.services.llm.pricing import PriceTable
from agency.services.llm.provider import OpenAIProvider
from agency.services.llm.settings import ModelSettings
from agency.services.llm.tenant_models import TenantModelSource, no_fallback


class ProviderRouter:
    """`Provider` over every configured provider. A model whose provider is unknown or not
    configured fails with `bad_request` / `config` before anything is sent."""

    def __init__(
        self,
        catalog: ProviderCatalog,
        *,
        fake_url: str | None = None,
        settings: ModelSettings | None = None,
        prices: PriceTable | None = None,
    ) -> None:
        if catalog.offline and fake_url is None:
            raise ModelConfigError(
                "no model provider configured: set OPENAI_API_KEY, or "
                "AGENCY_PROVIDER_<NAME>_API_KEY / _BASE_URL, or AGENCY_PROVIDERS "
                "(docs/models.md), or run with the fake LLM server"
            )
        self.catalog = catalog
        self._closed = False
        self._settings = settings = settings or ModelSettings.from_env()
        self._prices = prices = prices if prices is not None else PriceTable.from_env()
        self._tenants: TenantModelSource | None = None
        # (tenant, provider) → (fingerprint of its settings, its client).
        self._own: dict[tuple[str, str], tuple[str, OpenAIProvider]] = {}
        self._retired: list[OpenAIProvider] = []
        self._fake = (
            OpenAIProvider(
                base_url=fake_url, api_key="fake", settings=settings, prices=prices,
                strip_prefix=False,
            )
            if catalog.offline and fake_url is not None
            else None
        )  # fmt: skip
        self._providers = {
            name: OpenAIProvider(
                base_url=config.base_url,
                # Local OpenAI-compatible servers often take no key, but a header is sent.
                api_key=config.api_key or "none",
                settings=settings,
                prices=prices,
                strip_prefix=False,
                max_concurrency=config.max_concurrency,
                stream_usage=config.stream_usage,
            )
            for name, config in catalog.configured.items()
        }

    def use_tenant_models(self, source: TenantModelSource) -> None:
        """Let tenants' own provider settings serve their runs (`request.tenant`)."""
        self._tenants = source

    def provider_for(self, model: str) -> OpenAIProvider:
        """The operator's provider of `model` (or the fake, offline)."""
        config, _ = self.catalog.resolve(model)
        if config is None:
            assert self._fake is not None
            return self._fake
        return self._providers[config.name]

    async def complete(
        self, request: ModelRequest, on_delta: OnDelta | None = None
    ) -> ModelResponse:
        if self._closed:
            raise ModelConfigError("this provider is closed; create a new one")
        provider_name, name = self.catalog.split(request.model)
        provider = await self._tenant_provider(request.tenant, provider_name, request.model)
        if provider is None:
            provider = self.provider_for(request.model)
        return await provider.complete(replace(request, model=name), on_delta)

    async def _tenant_provider(
        self, tenant: str, provider: str, model: str
    ) -> OpenAIProvider | None:
        """The tenant's own client of `provider`; None where the operator's serves it."""
        if not tenant or self._tenants is None:
            return None
        models = await self._tenants.models(tenant)
        own = models.own(provider)
        if own is None:
            if not models.operator_fallback:
                raise ModelConfigError(no_fallback(provider, model))
            return None
        preset = self.catalog.providers[provider]
        base_url = own.base_url or preset.base_url
        fingerprint = hashlib.sha256(f"{base_url}\x1f{own.api_key}".encode()).hexdigest()
        kept = self._own.get((tenant, provider))
        if kept is not None and kept[0] == fingerprint:
            return kept[1]
        client = OpenAIProvider(
            base_url=base_url,
            api_key=own.api_key or "none",
            settings=self._settings,
            prices=self._prices,
            strip_prefix=False,
            stream_usage=preset.stream_usage,
            transport=guarded_transport(EgressPolicy.from_env()),
        )
        if kept is not None:
            self._retired.append(kept[1])  # calls in flight on it finish; closed at the end
        self._own[(tenant, provider)] = (fingerprint, client)
        return client

    async def close(self, timeout: float = 5.0) -> None:
        """Close every provider's HTTP client; idempotent and bounded."""
        if self._closed:
            return
        self._closed = True
        providers = [
            *self._providers.values(),
            *([self._fake] if self._fake else []),
            *(client for _, client in self._own.values()),
            *self._retired,
        ]
        await asyncio.gather(*(p.close(timeout) for p in providers))

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()


def provider_from_env(
    fake_url: str | None, settings: ModelSettings | None = None
) -> ProviderRouter:
    """The providers the environment configures (`ProviderCatalog.from_env`), or else the
    fake server at `fake_url` for every one; settings from `ModelSettings.from_env()`
    unless given. Nothing configured and no fake raises `ModelConfigError`."""
    return ProviderRouter(ProviderCatalog.from_env(), fake_url=fake_url, settings=settings)
