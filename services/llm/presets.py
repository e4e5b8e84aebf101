"""The model providers Agency knows by name: each one's documented OpenAI-compatible
endpoint and what it accepts of the request."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Preset:
    """`base_url`: the provider's chat completions API (`…/chat/completions` is appended);
    `stream_usage`: whether it accepts `stream_options.include_usage` (Mistral refuses
    the field with 422 and sends usage in its last chunk anyway)."""

    base_url: str
    stream_usage: bool = True


PRESETS: dict[str, Preset] = {
    "openai": Preset("https://api.openai.com/v1"),
    "anthropic": Preset("https://api.anthropic.com/v1"),
    "gemini": Preset("https://generativelanguage.googleapis.com/v1beta/openai"),
    "groq": Preset("https://api.groq.com/openai/v1"),
    "mistral": Preset("https://api.mistral.ai/v1", stream_usage=False),
    "deepseek": Preset("https://api.deepseek.com/v1"),
    "openrouter": Preset("https://openrouter.ai/api/v1"),
    "xai": Preset("https://api.x.ai/v1"),
    "ollama": Preset("http://localhost:11434/v1"),
    "vllm": Preset("http://localhost:8000/v1"),
}
