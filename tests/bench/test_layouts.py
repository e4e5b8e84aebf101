"""`python -m bench.layouts`: each layout stores a parked thread's events as it says, and
the server's live heap is read from its own profile."""

from __future__ import annotations

from pathlib import Path

import pytest

from agency.infra.launch.process import free_port
from bench.layouts import PARKED_APPENDS, PARKED_TYPES, Layout, live_heap_mb, parked, server


@pytest.mark.timeout(120)
@pytest.mark.parametrize(
    ("layout", "messages_per_thread", "subjects_per_thread"),
    [
        (Layout.TYPED, len(PARKED_TYPES), len(set(PARKED_TYPES))),
        (Layout.THREAD, len(PARKED_TYPES), 1),
        (Layout.DECISION, len(PARKED_APPENDS), 1),
    ],
)
async def test_a_layout_stores_a_parked_thread_as_it_says(
    layout: Layout, messages_per_thread: int, subjects_per_thread: int
) -> None:
    held = await parked(threads=40, writers=4, rest=0, layout=layout)
    assert held.messages == 40 * messages_per_thread
    assert held.subjects == 40 * subjects_per_thread


@pytest.mark.timeout(60)
async def test_a_server_with_a_profile_port_serves_its_heap(tmp_path: Path) -> None:
    port = free_port()
    async with server(tmp_path / "nats", port):
        assert 0 < await live_heap_mb(port) < 256
