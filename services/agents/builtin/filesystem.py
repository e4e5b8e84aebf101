"""A virtual filesystem per thread: files live in `file.written` events, never on the host.

`edit_file` requires the file to have been read first in the thread (the seed's
read-before-edit rule), so the model edits what it has seen. A path is at most
`max_path_chars` long without NUL; content over `max_file_bytes` is cut with a visible
marker, and the tool's answer says so (`contracts.limits`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from agency.contracts.events import FileWritten
from agency.contracts.limits import limits, path_problem, truncate_text
from agency.services.agents.middleware import PromptedStateTools
from agency.services.agents.tools import (
    StateTool,
    StateToolFn,
    StateToolOutcome,
    ToolSpec,
    object_schema,
)

if TYPE_CHECKING:
    from agency.services.agents.view import ThreadView

FILESYSTEM_PROMPT = """You have a virtual filesystem: `ls`, `read_file`, `write_file` and
`edit_file`. Read a file before you edit it."""


class _BadPath(Exception):
    pass


def _path(args: dict[str, Any]) -> str | None:
    """The stripped path, None when there is no string path, `_BadPath` saying why not."""
    path = args.get("path")
    if not isinstance(path, str):
        return None
    problem = path_problem(path, limits().max_path_chars)
    if problem is not None:
        raise _BadPath(problem)
    return path.strip()


def _bad_path(fn: StateToolFn) -> StateToolFn:
    def checked(args: dict[str, Any], state: ThreadView, run_id: str) -> StateToolOutcome:
        try:
            return fn(args, state, run_id)
        except _BadPath as e:
            return StateToolOutcome(output=str(e), error=True)

    return checked


def _written(run_id: str, path: str, content: str, verb: str) -> StateToolOutcome:
    stored = truncate_text(content, limits().max_file_bytes)
    note = (
        ""
        if stored == content
        else (f"; the content exceeded {limits().max_file_bytes} bytes and was truncated")
    )
    return StateToolOutcome(
        output=f"{verb}{note}",
        events=(FileWritten(run_id=run_id, path=path, content=stored),),
    )


def ls(args: dict[str, Any], state: ThreadView, run_id: str) -> StateToolOutcome:
    paths = sorted(p for p, _ in state.files)
    return StateToolOutcome(output="\n".join(paths) if paths else "(no files)")


def read_file(args: dict[str, Any], state: ThreadView, run_id: str) -> StateToolOutcome:
    path = _path(args)
    if path is None:
        return StateToolOutcome(output="read_file needs a non-empty string `path`", error=True)
    content = state.file(path)
    if content is None:
        return StateToolOutcome(output=f"no such file: {path}", error=True)
    lines = content.splitlines()
    offset = args.get("offset", 0)
    limit = args.get("limit", 2000)
    if not isinstance(offset, int) or not isinstance(limit, int) or offset < 0 or limit < 1:
        return StateToolOutcome(output="offset must be >= 0 and limit >= 1 (integers)", error=True)
    chosen = lines[offset : offset + limit]
    numbered = "\n".join(f"{offset + i + 1:>6}\t{line}" for i, line in enumerate(chosen))
    return StateToolOutcome(output=numbered or "(empty file)")


def write_file(args: dict[str, Any], state: ThreadView, run_id: str) -> StateToolOutcome:
    path = _path(args)
    content = args.get("content")
    if path is None or not isinstance(content, str):
        return StateToolOutcome(output="write_file needs string `path` and `content`", error=True)
    return _written(run_id, path, content, f"wrote {len(content)} characters to {path}")


def edit_file(args: dict[str, Any], state: ThreadView, run_id: str) -> StateToolOutcome:
    path = _path(args)
    old, new = args.get("oldString"), args.get("newString")
    replace_all = bool(args.get("replaceAll", False))
    if path is None or not isinstance(old, str) or not isinstance(new, str) or not old:
        return StateToolOutcome(
            output="edit_file needs `path`, a non-empty `oldString` and `newString`", error=True
        )
    content = state.file(path)
    if content is None:
        return StateToolOutcome(output=f"no such file: {path}", error=True)
    if path not in state.read_paths:
        return StateToolOutcome(output=f"read {path} with read_file before editing it", error=True)
    count = content.count(old)
    if count == 0:
        return StateToolOutcome(output=f"oldString not found in {path}", error=True)
    if count > 1 and not replace_all:
        return StateToolOutcome(
            output=f"oldString occurs {count} times in {path}; pass replaceAll or a longer string",
            error=True,
        )
    updated = content.replace(old, new) if replace_all else content.replace(old, new, 1)
    return _written(
        run_id, path, updated, f"edited {path} ({count if replace_all else 1} replacement(s))"
    )


def _spec(name: str, description: str, properties: dict[str, Any], required: list[str]) -> ToolSpec:
    return ToolSpec(
        name=name,
        description=description,
        parameters=object_schema(required, **properties),
    )


STRING = {"type": "string"}
# The tool whose successful calls mark a path read (`ThreadView.read_paths`).
READ_FILE = "read_file"
TOOLS = (
    StateTool(_spec("ls", "List the files of the virtual filesystem.", {}, []), ls),
    StateTool(
        _spec(
            READ_FILE,
            "Read a file, with line numbers. Optional offset (0-based line) and limit.",
            {"path": STRING, "offset": {"type": "integer"}, "limit": {"type": "integer"}},
            ["path"],
        ),
        _bad_path(read_file),
    ),
    StateTool(
        _spec(
            "write_file",
            "Create or overwrite a file.",
            {"path": STRING, "content": STRING},
            ["path", "content"],
        ),
        _bad_path(write_file),
    ),
    StateTool(
        _spec(
            "edit_file",
            "Replace oldString with newString in a file you have read.",
            {
                "path": STRING,
                "oldString": STRING,
                "newString": STRING,
                "replaceAll": {"type": "boolean"},
            },
            ["path", "oldString", "newString"],
        ),
        _bad_path(edit_file),
    ),
)


class FilesystemMiddleware(PromptedStateTools):
    name = "filesystem"
    tags = ("fs",)
    prompt = FILESYSTEM_PROMPT
    prompted_tools = TOOLS
