"""The `agency` command loads only what the command it runs uses: parsing loads no command's
code, and a command that talks to the API loads neither the server nor the model clients."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
# What only the system's own processes need (`agency up`, `agency serve`).
SERVER_SIDE = ("litestar", "openai", "mcp", "nats", "opentelemetry.sdk", "uvicorn")
# What no more than parsing the command line needs.
THIRD_PARTY = (*SERVER_SIDE, "asyncpg", "httpx", "msgspec", "structlog", "uvloop")


def imported(*argv: str) -> tuple[subprocess.CompletedProcess[str], set[str]]:
    """Run `agency ARGV` with `-X importtime`; what it did and the modules it imported."""
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "agency.services.cli.main", *argv],
        cwd=REPO, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    modules = {
        line.rsplit("|", 1)[1].strip()
        for line in done.stderr.splitlines()
        if line.startswith("import time:") and "|" in line
    }
    return done, modules


def loaded(modules: set[str], packages: tuple[str, ...]) -> list[str]:
    return sorted(m for m in modules if any(m == p or m.startswith(p + ".") for p in packages))


@pytest.mark.parametrize("argv", [("--help",), ("threads", "--help"), ("up", "--help")])
def test_help_loads_nothing_beyond_the_standard_library(argv: tuple[str, ...]) -> None:
    done, modules = imported(*argv)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "usage: agency" in done.stdout
    assert loaded(modules, THIRD_PARTY) == []


def test_a_parsed_command_line_has_loaded_no_command_code() -> None:
    probe = (
        "import sys\n"
        "from agency.services.cli.main import build_parser\n"
        "args = build_parser().parse_args(['threads', 'ls'])\n"
        "print('\\n'.join(sorted(sys.modules)))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], cwd=REPO, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    modules = set(done.stdout.split())
    assert "agency.services.cli.threads_client_cmd" in modules
    assert loaded(modules, THIRD_PARTY) == []
    assert loaded(modules, ("agency.services.client", "agency.services.api")) == []


def test_a_command_that_talks_to_the_api_loads_no_server_or_model_client(
    tmp_path: Path,
) -> None:
    done, modules = imported("threads", "ls", "--data-dir", str(tmp_path))
    assert done.returncode == 2 and "no running system found" in done.stderr
    assert "agency.services.client" in modules and "httpx" in modules
    assert loaded(modules, SERVER_SIDE) == []
    assert loaded(modules, ("agency.services.api", "agency.services.llm")) == []
