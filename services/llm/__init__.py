"""Model providers: the `Provider` port, its OpenAI-compatible adapter, and the router that
picks a provider by the model's prefix (`services/llm/router.py`, `docs/models.md`).

The fake LLM server for tests and the offline demo lives in `services.llm.fake_server`,
imported on demand so production code does not load it.
"""

from agency.services.llm.provider import (
    ModelConfigError,
    ModelConnectionError,
    ModelError,
    ModelErrorKind,
    ModelRequest,
    ModelRequestError,
    ModelResponse,
    ModelResponseError,
    ModelSettings,
    ModelStatusError,
    ModelStreamError,
    OpenAIProvider,
    Provider,
    split_model,
)
from agency.services.llm.router import ProviderRouter, provider_from_env

__all__ = [
    "ModelConfigError",
    "ModelConnectionError",
    "ModelError",
    "ModelErrorKind",
    "ModelRequest",
    "ModelRequestError",
    "ModelResponse",
    "ModelResponseError",
    "ModelSettings",
    "ModelStatusError",
    "ModelStreamError",
    "OpenAIProvider",
    "Provider",
    "ProviderRouter",
    "provider_from_env",
    "split_model",
]
