"""What a code agent's `ctx.reply` keeps of its text, shared by the runtime's reply and the
sandboxed worker's: the pieces written so far, each passed on as it is written."""

from __future__ import annotations

import abc


class WrittenReply(abc.ABC):
    """`write` keeps each piece of text and hands it to `_send` (an event, or a request to
    the runtime); `text` is what was written so far, the run's result."""

    def __init__(self) -> None:
        self.parts: list[str] = []

    @property
    def text(self) -> str:
        return "".join(self.parts)

    def write(self, text: str) -> None:
        if text:
            self.parts.append(text)
            self._send(text)

    @abc.abstractmethod
    def _send(self, text: str) -> None:
        """Pass on one piece of the reply as it is written."""
