"""The error of an operator's list setting read from the environment: an entry it cannot
take, named with the setting and what an entry must be."""

from __future__ import annotations


class SettingEntryError(ValueError):
    def __init__(self, env: str, entry: str, expected: str) -> None:
        self.entry = entry
        super().__init__(f"{env}: {entry[:80]!r} is not {expected}")
