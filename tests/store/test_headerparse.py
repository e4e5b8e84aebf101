"""The replacement header parser answers exactly as nats-py's own."""

from __future__ import annotations

import pytest

from agency.infra.jetstream.headerparse import original_parse_header_lines, parse_header_lines

BLOCKS = [
    b"Nats-Expected-Last-Subject-Sequence: 12\r\nNats-Expected-Last-Subject-Sequence-Subject: tenant.a.evt.thread.x.>\r\n\r\n",
    b"A:1\r\nB:\t2\r\n",
    b"Bad Name: x\r\nGood: y\r\n",
    b"Tab\tName: x\r\nSep\x1cName: y\r\n",
    b"No-Colon\r\nK: v: w\r\n",
    b"\xff\xfe: bad\r\nUtf: \xc3\xa9\xff\r\n",
    b"",
    b"Dup: 1\r\nDup: 2\r\n",
]  # fmt: skip


@pytest.mark.parametrize("raw", BLOCKS, ids=range(len(BLOCKS)))
def test_same_headers_as_the_library_parser(raw: bytes) -> None:
    assert parse_header_lines(raw) == original_parse_header_lines(raw)
