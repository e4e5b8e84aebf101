"""Embeddings for the store's semantic search, through a configured model provider.

`AGENCY_STORE_EMBEDDINGS` names the model (`provider:model`, as a blueprint's `model`;
the provider one of those configured, `docs/models.md`): its OpenAI-compatible
`/embeddings` endpoint embeds an item's indexed text when it is put (the vector is stored
with the put, on the log, so a replay never calls the model) and a search's `query`.
Without the setting, `index` and `query` are refused, naming it.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Sequence
from typing import Any

import httpx
import stamina
from litestar.exceptions import ClientException, ValidationException

from agency.services.llm.catalog import ProviderCatalog
from agency.services.llm.errors import ModelConfigError, ModelRequestError

SETTING = "AGENCY_STORE_EMBEDDINGS"
TIMEOUT = 30.0
MAX_TEXT = 32_000


def model() -> str | None:
    return os.environ.get(SETTING, "").strip() or None


def required() -> str:
    found = model()
    if found is None:
        raise ValidationException(
            f"semantic search needs an embeddings model: the operator sets `{SETTING}` "
            "(`provider:model` of a configured provider, docs/models.md); without it the "
            "store searches by `filter` and `namespace_prefix` only"
        )
    return found


def indexed_text(value: dict[str, Any], fields: Sequence[str] | None) -> str:
    """The text to embed: the fields named (`$` the whole value), else the whole value."""
    parts = []
    for field in fields or ("$",):
        found = value if field == "$" else value.get(field)
        if found is not None:
            parts.append(found if isinstance(found, str) else json.dumps(found, sort_keys=True))
    return "\n".join(parts)[:MAX_TEXT]


class _Retryable(Exception):
    pass


async def embed(texts: list[str]) -> list[tuple[float, ...]]:
    """One vector per text, from the model `AGENCY_STORE_EMBEDDINGS` names."""
    name = required()
    catalog = ProviderCatalog.from_env()
    try:
        config, model_name = catalog.resolve(name)
    except (ModelConfigError, ModelRequestError) as e:
        raise ValidationException(f"`{SETTING}` names a model that cannot run: {e}") from e
    if config is None:
        raise ValidationException(
            f"`{SETTING}` names {name!r}, but no model provider is configured (docs/models.md)"
        )
    headers = {"Authorization": f"Bearer {config.api_key}"} if config.api_key else {}
    url = config.base_url.rstrip("/") + "/embeddings"
    async with httpx.AsyncClient(timeout=TIMEOUT) as http:
        try:
            async for attempt in stamina.retry_context(
                on=(_Retryable, httpx.TransportError), attempts=3, wait_initial=0.2
            ):
                with attempt:
                    r = await http.post(
                        url, json={"model": model_name, "input": texts}, headers=headers
                    )
                    if r.status_code in (408, 429) or r.status_code >= 500:
                        raise _Retryable(f"{r.status_code}")
        except (_Retryable, httpx.TransportError) as e:
            raise ClientException(
                status_code=503, detail=f"the embeddings model {name!r} did not answer: {e}"
            ) from e
    if r.status_code >= 400:
        raise ValidationException(f"the embeddings model {name!r} refused: {r.status_code}")
    data = sorted(r.json().get("data", []), key=lambda d: d.get("index", 0))
    if len(data) != len(texts):
        raise ClientException(
            status_code=502, detail=f"the embeddings model {name!r} answered {len(data)} vectors"
        )
    return [tuple(float(x) for x in d["embedding"]) for d in data]


def cosine(a: Sequence[float], b: Sequence[float]) -> float:
    dot = sum(x * y for x, y in zip(a, b, strict=False))
    norm = math.sqrt(sum(x * x for x in a)) * math.sqrt(sum(y * y for y in b))
    return dot / norm if norm else 0.0
