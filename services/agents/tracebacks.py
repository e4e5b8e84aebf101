"""Where an exception in an app's own code came from: the innermost frame of its traceback
that is the app's, not agency's, the standard library's or an installed package's.

    try:
        fn()
    except Exception as e:
        where(e)     # "calc.py, line 7, in divide"
        located(e)   # "calc.py, line 7, in divide: ZeroDivisionError: division by zero"

A file under the current directory is named relative to it. When no frame is the app's, the
innermost frame of a library other than agency stands in (a library agency called); agency's
own frames are never named, its log has the whole traceback. A `SyntaxError` names the file
and line it reports itself.
"""

from __future__ import annotations

import os
import sys
import sysconfig
import traceback
from functools import cache
from pathlib import Path

from agency.contracts.events.tool import MAX_RAISED_AT_CHARS
from agency.services.agents.tools import ToolFailed


@cache
def _agencys() -> tuple[str, ...]:
    """The folders of agency's own files: the package and the folders its layers link to."""
    # This module is agency/services/agents/tracebacks.py, reached through the package.
    package = Path(__file__).absolute().parents[2]
    folders = {str(package), *(str(p.resolve()) for p in package.iterdir() if p.is_dir())}
    return tuple(f.rstrip(os.sep) + os.sep for f in folders)


@cache
def _libraries() -> tuple[str, ...]:
    """The folders of the standard library and the installed packages (those of the
    environment, and any other `site-packages` a `.pth` file put on the import path)."""
    paths = sysconfig.get_paths()
    folders = [paths[k] for k in ("stdlib", "platstdlib", "purelib", "platlib")]
    folders += [p for p in sys.path if Path(p).name in ("site-packages", "dist-packages")]
    folders += [os.path.realpath(f) for f in folders]
    return tuple(f.rstrip(os.sep) + os.sep for f in folders)


def _under(filename: str, folders: tuple[str, ...]) -> bool:
    return filename.startswith(folders) or os.path.realpath(filename).startswith(folders)


def is_apps(filename: str) -> bool:
    """Whether a traceback's file is the app's own code."""
    if filename.startswith("<"):  # <frozen importlib._bootstrap>, <string>
        return False
    return not _under(filename, _agencys()) and not _under(filename, _libraries())


def user_frame(error: BaseException) -> traceback.FrameSummary | None:
    """The innermost frame of `error`'s traceback in the app's code; else the innermost
    one of a library other than agency; None when there is neither."""
    frames = traceback.extract_tb(error.__traceback__)
    for frame in reversed(frames):
        if is_apps(frame.filename):
            return frame
    for frame in reversed(frames):
        name = frame.filename
        if not name.startswith("<") and not _under(name, _agencys()):
            return frame
    return None


def shown_path(filename: str) -> str:
    """`filename` relative to the current directory when it is under it."""
    try:
        relative = os.path.relpath(filename)
    except (OSError, ValueError):  # no current directory, another drive
        return filename
    return filename if relative.startswith(os.pardir) else relative


def _reported(error: BaseException) -> bool:
    """A `SyntaxError` (or `IndentationError`) that names a real file and line."""
    return (
        isinstance(error, SyntaxError)
        and bool(error.filename and error.lineno)
        and not str(error.filename).startswith("<")
    )


def where(error: BaseException) -> str:
    """`file, line N, in function` of the app's frame, "" when there is none."""
    if isinstance(error, SyntaxError) and _reported(error):
        return f"{shown_path(str(error.filename))}, line {error.lineno}"
    frame = user_frame(error)
    if frame is None:
        return ""
    return f"{shown_path(frame.filename)}, line {frame.lineno}, in {frame.name}"


def describe(error: BaseException) -> str:
    """`ExcType: message`, or `ExcType` alone when the message is empty."""
    message = str(error)
    return f"{type(error).__name__}: {message}" if message else type(error).__name__


def located(error: BaseException) -> str:
    """`file, line N, in function: ExcType: message`; `ExcType: message` with no place."""
    place = where(error)
    if not place:
        return describe(error)
    if isinstance(error, SyntaxError) and _reported(error):  # its message repeats the place
        return f"{place}: {type(error).__name__}: {error.msg}"
    return f"{place}: {describe(error)}"


MAX_TRACEBACK_CHARS = 8192


def formatted(error: BaseException) -> str:
    """The traceback's text, its last `MAX_TRACEBACK_CHARS` characters at most: those hold
    the innermost frames and the exception."""
    return _tail("".join(traceback.format_exception(error)))


def _tail(text: str) -> str:
    return text if len(text) <= MAX_TRACEBACK_CHARS else "…" + text[-MAX_TRACEBACK_CHARS:]


class RaisedElsewhere(ToolFailed):
    """An exception of a tool raised in another process (a sandboxed worker), as that
    process reported it: `ExcType: message` (what the model sees), where (`where`), and
    the traceback. The other process may run code that is not trusted: what it says is
    bounded here."""

    def __init__(self, error: str, raised_at: str = "", traceback: str = "") -> None:
        self.error = error
        self.raised_at = raised_at[:MAX_RAISED_AT_CHARS]
        self.traceback = _tail(traceback)
        super().__init__(error)
