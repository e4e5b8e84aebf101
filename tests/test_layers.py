"""The import contracts of `pyproject.toml` ([tool.importlinter]) hold: the layers of
docs/architecture.md, services that import no other service, and an extension API
(`services.agents`) that imports no service (`lint-imports`)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LINT_IMPORTS = Path(sys.executable).parent / "lint-imports"


def test_the_import_contracts_are_kept() -> None:
    """`lint-imports` finds every contract kept (the listed exceptions aside)."""
    done = subprocess.run(
        [str(LINT_IMPORTS), "--no-cache"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "0 broken" in done.stdout
