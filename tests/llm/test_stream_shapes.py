"""Every stream shape real OpenAI-compatible servers send assembles to its answer: calls
without an index, parallel calls in one chunk, empty and repeated ids, no finish_reason
before `[DONE]`, `stop` with calls, text before a call, reasoning, comment lines, usage
where each server puts it; a stream cut off before `[DONE]` is still a cut-off answer."""

from __future__ import annotations

import pytest

from agency.services.llm.assembly import Assembly
from agency.services.llm.errors import ModelStreamError
from agency.services.llm.wire import EventLines, chunk_of
from tests.llm.streams import SHAPES, assemble, check, stream


@pytest.mark.parametrize("name", sorted(SHAPES))
def test_each_shape_assembles_to_its_answer(name: str) -> None:
    check(assemble(stream(name)), SHAPES[name])


@pytest.mark.parametrize("name", sorted(SHAPES))
def test_each_shape_assembles_the_same_whatever_the_pieces(name: str) -> None:
    raw = stream(name)
    whole = assemble(raw)
    lines = EventLines()
    assembly = Assembly(model="m", max_bytes=1 << 20, seed="seed")
    done = False
    for i in range(0, len(raw), 7):
        for event, data in lines.feed(raw[i : i + 7]):
            if data == b"[DONE]":
                done = True
            elif not done:
                assembly.add(chunk_of(event, data))
    assert assembly.response(done=done) == whole


def test_assigned_ids_follow_the_request_and_the_position() -> None:
    """A call without an id gets the same id from the same request (a step run again, a
    re-execution), another from another request."""
    first = assemble(stream("noindex_empty_id_stop"), seed="a").message.tool_calls[0].id
    again = assemble(stream("noindex_empty_id_stop"), seed="a").message.tool_calls[0].id
    other = assemble(stream("noindex_empty_id_stop"), seed="b").message.tool_calls[0].id
    assert first == again != other
    assert first.startswith("call_")
    twice = assemble(stream("repeated_ids"), seed="a").message.tool_calls
    assert twice[0].id == "call_same" and twice[1].id not in {"call_same", first}


def test_a_stream_without_done_or_finish_reason_is_cut_off() -> None:
    with pytest.raises(ModelStreamError) as raised:
        assemble(stream("cut_off"))
    assert raised.value.kind == "truncated_stream" and raised.value.retryable
    # The same stream, whole but for its `[DONE]`: a call without a finish_reason.
    without_done = stream("no_finish_reason_tool").replace(b"data: [DONE]\n\n", b"")
    with pytest.raises(ModelStreamError):
        assemble(without_done)


def test_reasoning_is_not_answer_text() -> None:
    answer = assemble(stream("reasoning_content_tool"))
    assert answer.message.content == "" and answer.reasoning == "I should look it up."
    assert "reasoning" not in str(answer.message)
