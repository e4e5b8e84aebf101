"""Which model providers this process may call, and how: a blueprint's `model` is
`provider:model` (`openai:gpt-4.1`, `ollama:qwen3:8b`), each provider a base URL, a key
and options.

Where a provider's settings come from, the later winning:
1. the built-in presets (`services/llm/presets.py`): the documented endpoints;
2. the providers file named by `AGENCY_PROVIDERS` (JSON or YAML), which may also define
   providers of its own (any OpenAI-compatible endpoint under a name of its choosing);
3. the environment: `AGENCY_PROVIDER_<NAME>_BASE_URL`, `_API_KEY`, `_MAX_CONCURRENCY`;
   for `openai` also `OPENAI_API_KEY` and `OPENAI_BASE_URL` (under the `AGENCY_` ones).

A provider is configured when it has a key, or when its base URL is set (a local server
may take no key: `ollama`, `vllm`, an `OPENAI_BASE_URL` alone), or when the providers
file names it. With no provider configured the process is offline: the fake model
stands in for every known provider. Keys are never shown: not in `repr`, errors or logs.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated

import msgspec
import yaml

from agency.services.llm.errors import ModelConfigError, ModelRequestError
from agency.services.llm.port import split_model
from agency.services.llm.presets import PRESETS

PROVIDERS_FILE = "AGENCY_PROVIDERS"
_NAME = re.compile(r"^[a-z][a-z0-9_-]{0,39}$")


class ProvidersFileError(ValueError):
    """The providers file cannot be read or does not fit its shape (its path and why)."""


class ProviderEntry(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """One provider in the providers file (camelCase). `apiKeyEnv` names an environment
    variable holding the key, so the file itself need hold none."""

    base_url: str | None = msgspec.field(default=None, name="baseUrl")
    api_key: str | None = msgspec.field(default=None, name="apiKey")
    api_key_env: str | None = msgspec.field(default=None, name="apiKeyEnv")
    max_concurrency: Annotated[int, msgspec.Meta(ge=1)] | None = msgspec.field(
        default=None, name="maxConcurrency"
    )
    stream_usage: bool | None = msgspec.field(default=None, name="streamUsage")


class ProvidersFile(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    providers: dict[str, ProviderEntry] = {}


@dataclass(frozen=True, slots=True)
class ProviderConfig:
    """A configured provider: where, with which key (hidden from `repr`), how many calls
    at once at most (None: no limit), and whether it takes `stream_options`."""

    name: str
    base_url: str
    api_key: str = field(default="", repr=False)
    max_concurrency: int | None = None
    stream_usage: bool = True


@dataclass(frozen=True, slots=True)
class _Known:
    base_url: str
    stream_usage: bool
    api_key: str = field(default="", repr=False)
    max_concurrency: int | None = None
    # Named in the providers file, or its base URL set in the environment.
    given: bool = False


def _presets() -> dict[str, ProviderConfig]:
    return {
        name: ProviderConfig(name=name, base_url=p.base_url, stream_usage=p.stream_usage)
        for name, p in PRESETS.items()
    }


@dataclass(frozen=True, slots=True)
class ProviderCatalog:
    """The providers known by name with their settings (`providers`: presets, the file's,
    the environment's), and those of them configured (`configured`)."""

    providers: Mapping[str, ProviderConfig] = field(default_factory=_presets)
    configured: Mapping[str, ProviderConfig] = field(default_factory=dict)

    @property
    def known(self) -> frozenset[str]:
        return frozenset(self.providers)

    @property
    def offline(self) -> bool:
        return not self.configured

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> ProviderCatalog:
        source = os.environ if env is None else env
        known = {name: _Known(p.base_url, p.stream_usage) for name, p in PRESETS.items()}
        path = source.get(PROVIDERS_FILE)
        if path:
            for name, entry in _read_file(Path(path)).providers.items():
                known[name] = _from_entry(name, entry, known.get(name), source)
        for name in list(known):
            known[name] = _from_env(name, known[name], source)
        providers = {
            name: ProviderConfig(
                name=name,
                base_url=k.base_url,
                api_key=k.api_key,
                max_concurrency=k.max_concurrency,
                stream_usage=k.stream_usage,
            )
            for name, k in known.items()
        }
        configured = {name: providers[name] for name, k in known.items() if k.api_key or k.given}
        return cls(providers=providers, configured=configured)

    def split(self, model: str) -> tuple[str, str]:
        """(provider, model name) of a `provider:model` id; an unknown provider raises
        `ModelRequestError`."""
        return split_model(model, self.known)

    def resolve(self, model: str) -> tuple[ProviderConfig | None, str]:
        """The provider's configuration (None offline) and the model's own name; an
        unknown or unconfigured provider raises (`ModelRequestError`, `ModelConfigError`)."""
        provider, name = self.split(model)
        if self.offline:
            return None, name
        config = self.configured.get(provider)
        if config is None:
            setting = f"AGENCY_PROVIDER_{_env_name(provider)}_API_KEY"
            configured = ", ".join(sorted(self.configured))
            raise ModelConfigError(
                f"model provider {provider!r} (model {model!r}) is not configured here: set "
                f"{setting} (or its base URL for a local server, docs/models.md); "
                f"configured: {configured}"
            )
        return config, name

    def problem(self, model: str) -> str | None:
        """Why a blueprint's `model` cannot run here, or None ("" is the default model)."""
        if not model:
            return None
        try:
            self.resolve(model)
        except (ModelRequestError, ModelConfigError) as e:
            return str(e)
        return None


def _env_name(provider: str) -> str:
    return re.sub(r"[^A-Z0-9]", "_", provider.upper())


def _read_file(path: Path) -> ProvidersFile:
    try:
        raw = path.read_bytes()
    except OSError as e:
        raise ProvidersFileError(f"{PROVIDERS_FILE}={path}: cannot read it ({e})") from e
    try:
        data = yaml.safe_load(raw) if path.suffix in {".yaml", ".yml"} else msgspec.json.decode(raw)
        parsed = msgspec.convert(data or {}, ProvidersFile)
    except (yaml.YAMLError, msgspec.DecodeError, msgspec.ValidationError) as e:
        raise ProvidersFileError(f"{PROVIDERS_FILE}={path}: {e}") from e
    for name in parsed.providers:
        if not _NAME.match(name):
            raise ProvidersFileError(
                f"{PROVIDERS_FILE}={path}: provider name {name!r} must be lowercase letters, "
                "digits, '-' or '_', starting with a letter"
            )
    return parsed


def _from_entry(
    name: str, entry: ProviderEntry, preset: _Known | None, env: Mapping[str, str]
) -> _Known:
    base_url = entry.base_url or (preset.base_url if preset else "")
    if not base_url:
        raise ProvidersFileError(f"{PROVIDERS_FILE}: provider {name!r} needs a baseUrl")
    key = entry.api_key or (env.get(entry.api_key_env, "") if entry.api_key_env else "")
    usage = (
        entry.stream_usage
        if entry.stream_usage is not None
        else (not preset or preset.stream_usage)
    )
    return _Known(
        base_url=base_url,
        stream_usage=usage,
        api_key=key,
        max_concurrency=entry.max_concurrency,
        given=True,
    )


def _from_env(name: str, known: _Known, env: Mapping[str, str]) -> _Known:
    prefix = f"AGENCY_PROVIDER_{_env_name(name)}_"
    base_url = env.get(prefix + "BASE_URL") or ""
    key = env.get(prefix + "API_KEY") or ""
    if name == "openai":
        base_url = base_url or env.get("OPENAI_BASE_URL", "")
        key = key or env.get("OPENAI_API_KEY", "")
    raw_limit = env.get(prefix + "MAX_CONCURRENCY") or ""
    limit = known.max_concurrency
    if raw_limit:
        if not raw_limit.isdigit() or int(raw_limit) < 1:
            raise ProvidersFileError(
                f"{prefix}MAX_CONCURRENCY={raw_limit!r}: expected a positive integer"
            )
        limit = int(raw_limit)
    return _Known(
        base_url=base_url or known.base_url,
        stream_usage=known.stream_usage,
        api_key=key or known.api_key,
        max_concurrency=limit,
        given=known.given or bool(base_url),
    )
