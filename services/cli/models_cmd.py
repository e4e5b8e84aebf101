"""`agency models ls|check`: the model providers this environment configures, and one
tiny call to see that a model answers (keys are never shown)."""

from __future__ import annotations

import argparse
import time
from typing import TYPE_CHECKING, Any

from agency.services.cli.arguments import command_group

if TYPE_CHECKING:
    from agency.services.llm.catalog import ProviderCatalog

PROMPT = "Answer with the single word OK."


def register(groups: Any) -> None:
    sub = command_group(groups, "models", "model providers: list them, check one")
    ls = sub.add_parser("ls", help="the providers known here, configured or not, and where")
    ls.set_defaults(handler=models_ls)
    check = sub.add_parser("check", help="make one tiny call to MODEL and say what failed")
    check.add_argument("model", help="provider:model, e.g. openai:gpt-4.1-mini")
    check.add_argument(
        "--timeout", type=float, default=30.0, help="seconds to wait for the answer (30)"
    )
    check.set_defaults(handler=models_check)


def _catalog() -> ProviderCatalog | None:
    from agency.services.llm.catalog import ProviderCatalog, ProvidersFileError

    try:
        return ProviderCatalog.from_env()
    except ProvidersFileError as e:
        print(f"the provider settings are not usable: {e}")
        return None


async def models_ls(args: argparse.Namespace) -> int:
    from agency.services.llm.presets import PRESETS

    catalog = _catalog()
    if catalog is None:
        return 2
    if catalog.offline:
        print("no provider configured: the offline fake model answers every one")
    for name in sorted(catalog.known):
        config = catalog.configured.get(name)
        if config is None:
            preset = PRESETS.get(name)
            print(f"{name:<12} not configured  {preset.base_url if preset else ''}")
            continue
        key = "key set" if config.api_key else "no key"
        limit = f", at most {config.max_concurrency} at once" if config.max_concurrency else ""
        print(f"{name:<12} configured      {config.base_url} ({key}{limit})")
    return 0


async def models_check(args: argparse.Namespace) -> int:
    """One call of a few tokens; exit 0 when the model answered, 1 (with why) when not."""
    from agency.contracts.events.base import ChatMessage
    from agency.services.llm.errors import ModelError
    from agency.services.llm.port import ModelRequest
    from agency.services.llm.router import ProviderRouter
    from agency.services.llm.settings import ModelSettings

    catalog = _catalog()
    if catalog is None:
        return 2
    model: str = args.model
    if catalog.offline:
        print(f"{model}: no provider configured here (docs/models.md)")
        return 1
    settings = ModelSettings(timeout=args.timeout, max_attempts=1)
    request = ModelRequest(model=model, messages=(ChatMessage(role="user", content=PROMPT),))
    started = time.monotonic()
    try:
        async with ProviderRouter(catalog, settings=settings) as router:
            where = router.provider_for(model).base_url
            answer = await router.complete(request)
    except ModelError as e:
        print(f"{model}: failed ({e.kind}): {e}")
        return 1
    took = time.monotonic() - started
    said = " ".join(answer.message.content.split())[:80]
    calls = f", {len(answer.message.tool_calls)} tool calls" if answer.message.tool_calls else ""
    print(
        f"{model}: ok in {took:.1f}s from {where} ({answer.model}, "
        f"{answer.usage.input_tokens}+{answer.usage.output_tokens} tokens{calls}): {said!r}"
    )
    return 0
