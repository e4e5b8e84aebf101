"""The import contracts of pyproject's `[tool.importlinter]` hold (`lint-imports`)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LINT_IMPORTS = Path(sys.executable).parent / "lint-imports"


def test_the_import_contracts_are_kept() -> None:
    done = subprocess.run(
        [str(LINT_IMPORTS), "--no-cache"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "0 broken" in done.stdout
