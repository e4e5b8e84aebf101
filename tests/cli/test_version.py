"""`agency version` says the installed package's version and the contracts it speaks."""

from __future__ import annotations

import importlib.metadata
import tomllib
from pathlib import Path

from agency.contracts.codec import EVENT_TYPES
from tests.cli.test_commands import agency

REPO = Path(__file__).resolve().parents[2]


async def test_version_names_the_package_the_events_and_the_migrations() -> None:
    code, out, err = await agency("version")
    assert (code, err) == (0, "")
    declared = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]
    assert importlib.metadata.version("agency") == declared
    package, events, commands, migrations = out.splitlines()
    assert package.startswith(f"agency {declared} (Python 3.")
    assert events.startswith(f"events: {len(EVENT_TYPES)} types, version 1 but ")
    assert "blueprint.saved v2" in events
    assert commands.startswith("commands: ") and commands.endswith(" types")
    newest = sorted(p.name for p in (REPO / "infra" / "migrations").glob("*.sql"))[-1]
    assert migrations.endswith(f"the newest {newest}")
