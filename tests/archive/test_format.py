"""The archive file on its own: files named safely and distinctly, every part checked."""

from __future__ import annotations

import io
import tarfile

import pytest

from agency.services.archive.errors import MalformedArchive
from agency.services.archive.format import file_name, unpack


def test_files_get_distinct_safe_names_in_the_archive() -> None:
    taken: set[str] = set()
    names = [
        file_name("t1", path, i, taken)
        for i, path in enumerate(["a.md", "/a.md", "../../etc/passwd", "dir/b.txt", "_2"])
    ]
    assert names == [
        "files/t1/a.md",
        "files/t1/_1",
        "files/t1/_2",
        "files/t1/dir/b.txt",
        "files/t1/_4",
    ]


def _tar(members: dict[str, bytes], link: bool = False) -> bytes:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w:gz") as tar:
        for name, content in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(content)
            tar.addfile(info, io.BytesIO(content))
        if link:
            info = tarfile.TarInfo("escape")
            info.type = tarfile.SYMTYPE
            info.linkname = "/etc/passwd"
            tar.addfile(info)
    return out.getvalue()


@pytest.mark.parametrize(
    ("data", "says"),
    [
        (b"plain text", "not a tar.gz file"),
        (_tar({"events.jsonl": b""}), "no manifest.json"),
        (_tar({"manifest.json": b"[1, 2"}), "manifest.json is not a JSON object"),
        (_tar({"manifest.json": b'{"format": "zip"}'}), "names format 'zip'"),
        (_tar({"manifest.json": b'{"format": "agency-archive", "version": 1}'}), "manifest.json: "),
        (_tar({"manifest.json": b"{}"}, link=True), "member 'escape' is not a regular file"),
    ],
    ids=["not-gzip", "no-manifest", "bad-json", "other-format", "incomplete", "symlink"],
)
def test_a_malformed_archive_is_refused_saying_why(data: bytes, says: str) -> None:
    with pytest.raises(MalformedArchive) as refused:
        unpack(data)
    assert says in str(refused.value)
