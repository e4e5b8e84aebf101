"""Static blueprints from a JSON file, beside those the agent system registers in Python.

The file holds a list of blueprints in the wire shape (`contracts.events.BlueprintSpec`):
`[{"name": "researcher", "prompt": "...", "tags": ["default"]}]`.
"""

from __future__ import annotations

from pathlib import Path

import msgspec

from agency.contracts.events import BlueprintSpec

_decoder = msgspec.json.Decoder(list[BlueprintSpec])


class BlueprintFileError(Exception):
    def __init__(self, path: Path, problem: str) -> None:
        self.path = path
        super().__init__(f"cannot read blueprints from {path}: {problem}")


def load_blueprint_file(path: Path) -> list[BlueprintSpec]:
    try:
        data = path.read_bytes()
    except OSError as e:
        raise BlueprintFileError(path, e.strerror or str(e)) from e
    try:
        blueprints = _decoder.decode(data)
    except msgspec.DecodeError as e:
        raise BlueprintFileError(path, str(e)) from e
    names = [b.name for b in blueprints]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise BlueprintFileError(path, f"blueprint names appear twice: {', '.join(duplicates)}")
    return blueprints
