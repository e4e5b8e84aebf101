"""Model providers: the `Provider` port and its OpenAI-compatible adapter.

The fake LLM server for tests and the offline demo lives in `services.llm.fake_server`,
imported on demand so production code does not load it.
"""

from services.llm.provider import (
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
    provider_from_env,
    split_model,
)

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
    "provider_from_env",
    "split_model",
]
