"""The filesystem tools refuse paths no file can have and cut content an event cannot hold."""

from __future__ import annotations

import pytest

from agency.contracts.events import FileWritten
from agency.contracts.limits import limits
from agency.services.agents.builtin.filesystem import TOOLS
from agency.services.agents.view import ThreadView

TOOL = {t.spec.name: t.fn for t in TOOLS}
STATE = ThreadView(tenant_id="t", thread_id="th", files=(("a.md", "hello"),))


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        pytest.param("p" * 10_000, "a file path of 10000 characters exceeds the limit of 512", id="long"),
        pytest.param("a\x00.md", "a file path must not contain NUL", id="nul"),
        pytest.param("  ", "a file path must not be empty", id="blank"),
    ],
)  # fmt: skip
@pytest.mark.parametrize("tool", ["write_file", "read_file", "edit_file"])
def test_a_path_no_file_can_have_is_a_tool_error_saying_why(
    tool: str, path: str, expected: str
) -> None:
    args = {"path": path, "content": "x", "oldString": "a", "newString": "b"}
    outcome = TOOL[tool](args, STATE, "r1")
    assert outcome.error and expected in outcome.output and not outcome.events


def test_content_over_the_file_limit_is_written_cut_and_the_model_is_told() -> None:
    content = "y" * (limits().max_file_bytes + 812_345)
    outcome = TOOL["write_file"]({"path": "big.txt", "content": content}, STATE, "r1")
    (written,) = outcome.events
    assert isinstance(written, FileWritten)
    assert len(written.content.encode()) <= limits().max_file_bytes
    assert written.content.endswith(" bytes omitted]")
    assert "was truncated" in outcome.output and not outcome.error
