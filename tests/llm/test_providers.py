"""Providers by prefix: presets overridden by the providers file and the environment,
several providers in one process each with its own client, key and limit, the fake
standing in for all when none is configured, and a model of an unknown or unconfigured
provider refused with its reason before anything is sent."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

import pytest

from agency.contracts.events.base import ChatMessage
from agency.services.llm.catalog import ProviderCatalog, ProvidersFileError
from agency.services.llm.errors import ModelConfigError, ModelRequestError
from agency.services.llm.port import ModelRequest
from agency.services.llm.router import ProviderRouter, provider_from_env
from agency.services.llm.settings import ModelSettings
from tests.llm.streams import ReplayServer, stream

REPO = Path(__file__).resolve().parents[2]
FAST = ModelSettings(timeout=5, max_attempts=1)


def ask(model: str) -> ModelRequest:
    return ModelRequest(model=model, messages=(ChatMessage(role="user", content="hi"),))


def test_presets_are_the_documented_endpoints_and_nothing_is_configured_by_default() -> None:
    catalog = ProviderCatalog.from_env({})
    assert catalog.offline
    assert {"openai", "anthropic", "gemini", "groq", "mistral", "deepseek", "openrouter"} | {
        "ollama",
        "vllm",
    } <= catalog.known
    # Offline every known provider is accepted (the fake stands in); unknown ones are not.
    assert catalog.problem("gemini:flash") is None and catalog.problem("") is None
    assert "unknown model provider 'acme'" in (catalog.problem("acme:x") or "")


def test_the_environment_configures_providers_over_their_presets() -> None:
    catalog = ProviderCatalog.from_env(
        {
            "OPENAI_API_KEY": "sk-openai",
            "AGENCY_PROVIDER_GEMINI_API_KEY": "g-key",
            "AGENCY_PROVIDER_GEMINI_MAX_CONCURRENCY": "3",
            "AGENCY_PROVIDER_OLLAMA_BASE_URL": "http://gpu:11434/v1",
        }
    )
    openai, gemini, ollama = (catalog.configured[n] for n in ("openai", "gemini", "ollama"))
    assert (openai.base_url, openai.api_key) == ("https://api.openai.com/v1", "sk-openai")
    assert gemini.base_url == "https://generativelanguage.googleapis.com/v1beta/openai"
    assert gemini.max_concurrency == 3 and gemini.api_key == "g-key"
    assert (ollama.base_url, ollama.api_key) == ("http://gpu:11434/v1", "")
    assert set(catalog.configured) == {"openai", "gemini", "ollama"}
    assert "sk-openai" not in repr(catalog) and "g-key" not in repr(catalog)
    # OPENAI_BASE_URL alone configures a local OpenAI-compatible server, as it did.
    local = ProviderCatalog.from_env({"OPENAI_BASE_URL": "http://localhost:8000/v1"})
    assert local.configured["openai"].base_url == "http://localhost:8000/v1"
    # The AGENCY_ settings win over OPENAI_ ones.
    both = ProviderCatalog.from_env(
        {"OPENAI_API_KEY": "old", "AGENCY_PROVIDER_OPENAI_API_KEY": "new"}
    )
    assert both.configured["openai"].api_key == "new"
    assert not ProviderCatalog.from_env({}).configured
    with pytest.raises(ProvidersFileError, match="MAX_CONCURRENCY"):
        ProviderCatalog.from_env({"AGENCY_PROVIDER_GROQ_MAX_CONCURRENCY": "none"})


def test_a_configured_catalog_refuses_what_it_does_not_configure() -> None:
    catalog = ProviderCatalog.from_env({"AGENCY_PROVIDER_GROQ_API_KEY": "gk"})
    said = catalog.problem("gemini:flash") or ""
    assert "'gemini'" in said and "AGENCY_PROVIDER_GEMINI_API_KEY" in said and "gk" not in said
    assert catalog.problem("groq:llama-3.3-70b") is None
    with pytest.raises(ModelRequestError):
        catalog.resolve("acme:x")
    with pytest.raises(ModelConfigError):
        catalog.resolve("openai:gpt-4.1")
    assert catalog.resolve("groq:openai/gpt-oss-120b")[1] == "openai/gpt-oss-120b"


@pytest.mark.parametrize("suffix", [".json", ".yaml"])
def test_a_providers_file_adds_providers_and_takes_keys_from_the_environment(
    tmp_path: Path, suffix: str
) -> None:
    providers = {
        "providers": {
            "together": {"baseUrl": "https://api.together.xyz/v1", "apiKeyEnv": "TOGETHER_KEY"},
            "vllm": {"baseUrl": "http://gpu:8000/v1", "maxConcurrency": 4},
            "mistral": {"apiKey": "m-key"},
        }
    }
    path = tmp_path / f"providers{suffix}"
    path.write_text(json.dumps(providers))  # JSON is YAML too
    catalog = ProviderCatalog.from_env({"AGENCY_PROVIDERS": str(path), "TOGETHER_KEY": "t-key"})
    assert catalog.configured["together"].api_key == "t-key"
    assert catalog.resolve("together:meta-llama/Llama-3-70b")[1] == "meta-llama/Llama-3-70b"
    assert catalog.configured["vllm"].max_concurrency == 4
    mistral = catalog.configured["mistral"]
    assert mistral.base_url == "https://api.mistral.ai/v1" and not mistral.stream_usage


@pytest.mark.parametrize(
    ("content", "says"),
    [
        ('{"providers": {"x": {"baseUrl": "http://h/v1", "colour": 1}}}', "colour"),
        ('{"providers": {"Bad Name": {"baseUrl": "http://h/v1"}}}', "Bad Name"),
        ('{"providers": {"new": {}}}', "needs a baseUrl"),
        ("{not json", "providers.json"),
    ],
)
def test_a_bad_providers_file_is_refused_with_its_reason(
    tmp_path: Path, content: str, says: str
) -> None:
    path = tmp_path / "providers.json"
    path.write_text(content)
    with pytest.raises(ProvidersFileError, match=says):
        ProviderCatalog.from_env({"AGENCY_PROVIDERS": str(path)})


async def test_several_providers_answer_in_one_process_each_with_its_own_key() -> None:
    text = stream("text_usage_only")
    async with ReplayServer([], otherwise=text) as local, ReplayServer([], otherwise=text) as far:
        catalog = ProviderCatalog.from_env(
            {
                "AGENCY_PROVIDER_OLLAMA_BASE_URL": local.base_url,
                "AGENCY_PROVIDER_MISTRAL_BASE_URL": far.base_url,
                "AGENCY_PROVIDER_MISTRAL_API_KEY": "m-secret",
            }
        )
        async with ProviderRouter(catalog, settings=FAST) as router:
            assert router.provider_for("ollama:x") is not router.provider_for("mistral:y")
            answers = await asyncio.gather(
                router.complete(ask("ollama:qwen3:8b")),
                router.complete(ask("mistral:mistral-large-latest")),
            )
            with pytest.raises(ModelConfigError, match="'openai'"):
                await router.complete(ask("openai:gpt-4.1"))
    assert [a.message.content for a in answers] == ["An oxbow is a yoke."] * 2
    assert [r["model"] for r in local.requests] == ["qwen3:8b"]
    assert [r["model"] for r in far.requests] == ["mistral-large-latest"]
    assert far.keys == ["Bearer m-secret"] and local.keys == ["Bearer none"]
    # Mistral refuses `stream_options`; the others are asked for usage with it.
    assert "stream_options" not in far.requests[0] and "stream_options" in local.requests[0]


async def test_offline_the_fake_answers_every_known_provider() -> None:
    async with (
        ReplayServer([], otherwise=stream("noindex_text")) as fake,
        ProviderRouter(ProviderCatalog(), fake_url=fake.base_url) as router,
    ):
        answer = await router.complete(ask("anthropic:claude-sonnet-4-5"))
        with pytest.raises(ModelRequestError):
            await router.complete(ask("acme:x"))
    assert answer.message.content == "An anvil is for forging."
    assert fake.requests[0]["model"] == "claude-sonnet-4-5"
    with pytest.raises(ModelConfigError, match="no model provider configured"):
        ProviderRouter(ProviderCatalog())


async def test_provider_from_env_keeps_openai_settings_working(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for name in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "AGENCY_PROVIDERS"):
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(ModelConfigError, match="OPENAI_API_KEY"):
        provider_from_env(None)
    async with provider_from_env("http://127.0.0.1:9/v1") as fake:
        assert fake.provider_for("openai:m").base_url == "http://127.0.0.1:9/v1"
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    async with provider_from_env("http://127.0.0.1:9/v1") as real:
        assert real.provider_for("openai:m").base_url == "https://api.openai.com/v1"
    monkeypatch.setenv("OPENAI_BASE_URL", "http://localhost:8000/v1")
    async with provider_from_env(None) as router:
        assert router.provider_for("openai:m").base_url == "http://localhost:8000/v1"
        assert router.provider_for("gpt-4.1").base_url == "http://localhost:8000/v1"


async def test_a_providers_calls_at_once_are_limited() -> None:
    text = stream("text_usage_only")
    async with ReplayServer([], otherwise=text, delay=0.2) as server:
        catalog = ProviderCatalog.from_env(
            {
                "AGENCY_PROVIDER_VLLM_BASE_URL": server.base_url,
                "AGENCY_PROVIDER_VLLM_MAX_CONCURRENCY": "1",
            }
        )
        async with ProviderRouter(catalog, settings=FAST) as router:
            await asyncio.gather(*(router.complete(ask("vllm:m")) for _ in range(3)))
    assert len(server.requests) == 3 and server.most_at_once == 1


async def test_models_check_makes_one_call_and_says_what_failed() -> None:
    async def check(model: str, env: dict[str, str]) -> tuple[int, str]:
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "agency.services.cli.main", "models", "check", model,
            "--timeout", "5",
            cwd=REPO, env={"PATH": "/usr/bin:/bin", **env},
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
        )  # fmt: skip
        out, _ = await asyncio.wait_for(proc.communicate(), timeout=60)
        return proc.returncode or 0, out.decode()

    async with ReplayServer([], otherwise=stream("text_usage_only")) as server:
        env = {"AGENCY_PROVIDER_GROQ_BASE_URL": server.base_url}
        env["AGENCY_PROVIDER_GROQ_API_KEY"] = "gsk-never-shown"
        ok = await check("groq:llama-3.3-70b", env)
        unconfigured = await check("gemini:flash", env)
    refused = await check(
        "groq:m", {**env, "AGENCY_PROVIDER_GROQ_BASE_URL": "http://127.0.0.1:9/v1"}
    )
    assert ok[0] == 0 and "ok" in ok[1] and "An oxbow is a yoke." in ok[1], ok
    assert server.requests[0]["model"] == "llama-3.3-70b"
    assert unconfigured[0] == 1 and "not configured" in unconfigured[1]
    assert refused[0] == 1 and "failed (connection)" in refused[1]
    assert all("gsk-never-shown" not in out for _, out in (ok, unconfigured, refused))
