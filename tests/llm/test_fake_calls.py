"""The offline model over HTTP: `CALL` lines, and a posted script's step counting."""

from __future__ import annotations

import uuid
from typing import Any

import httpx

from agency.services.llm.fake_server import FakeLLMServer

LOOKUP = {"type": "function", "function": {"name": "lookup", "parameters": {"type": "object"}}}
NOTE = {"type": "function", "function": {"name": "note", "parameters": {"type": "object"}}}


async def chat(llm: FakeLLMServer, messages: list[dict[str, Any]], **extra: Any) -> Any:
    body = {"model": "fake-model", "messages": messages, "tools": [LOOKUP, NOTE], **extra}
    async with httpx.AsyncClient(timeout=10) as http:
        r = await http.post(f"{llm.base_url}/chat/completions", json=body)
    assert r.status_code == 200, r.text
    return r.json()["choices"][0]["message"]


def user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text}


def answered(message: dict[str, Any], *results: str) -> list[dict[str, Any]]:
    calls = message["tool_calls"]
    tools = [
        {"role": "tool", "tool_call_id": c["id"], "content": r}
        for c, r in zip(calls, results, strict=True)
    ]
    return [{"role": "assistant", "content": None, "tool_calls": calls}, *tools]


async def test_call_lines_are_called_then_their_results_quoted(llm: FakeLLMServer) -> None:
    ask = user('Two things.\nCALL lookup {"word": "risky"}\n  CALL note {}')
    first = await chat(llm, [ask])
    calls = [(c["function"]["name"], c["function"]["arguments"]) for c in first["tool_calls"]]
    assert calls == [("lookup", '{"word": "risky"}'), ("note", "{}")]

    second = await chat(llm, [ask, *answered(first, "definition of risky", "noted")])
    assert second["content"] == "Done. lookup answered: definition of risky; note answered: noted"
    assert not second.get("tool_calls")


async def test_a_tool_not_offered_or_bad_arguments_are_answered_in_text(
    llm: FakeLLMServer,
) -> None:
    missing = await chat(llm, [user('CALL send_email {"to": "a@b.c"}')])
    assert missing["content"] == (
        "I cannot call send_email: it is not offered to me here. The tools offered: lookup, note."
    )
    assert not missing.get("tool_calls")
    broken = await chat(llm, [user("CALL lookup {word: risky}")])
    assert broken["content"].startswith("I cannot call lookup: its arguments are not JSON")
    listed = await chat(llm, [user("CALL lookup [1]")])
    assert listed["content"] == "I cannot call lookup: its arguments must be a JSON object."


async def test_a_posted_script_counts_steps_per_turn_or_across_the_conversation(
    llm: FakeLLMServer,
) -> None:
    root = llm.base_url.removesuffix("/v1")
    steps = [{"tool_calls": [{"name": "note", "arguments": {}}]}, {"content": "first answer"}]
    per_turn, whole = f"turn-{uuid.uuid4().hex[:8]}", f"conv-{uuid.uuid4().hex[:8]}"
    async with httpx.AsyncClient(timeout=5) as http:
        for key, count in ((per_turn, None), (whole, "conversation")):
            body: dict[str, Any] = {"key": key, "steps": steps}
            if count is not None:
                body["count"] = count
            assert (await http.post(f"{root}/_scripts", json=body)).status_code == 204

    for key, second_turn in ((per_turn, "tool_calls"), (whole, "done")):
        first = await chat(llm, [user(key)])
        turn = [user(key), *answered(first, "ok")]
        assert (await chat(llm, turn))["content"] == "first answer"
        again = await chat(
            llm, [*turn, {"role": "assistant", "content": "first answer"}, user(key)]
        )
        if second_turn == "tool_calls":
            assert again["tool_calls"][0]["function"]["name"] == "note"
        else:
            assert again["content"] == "done" and not again.get("tool_calls")
