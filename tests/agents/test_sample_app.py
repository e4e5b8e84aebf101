"""An app written against the public `agency` package alone type-checks with `mypy --strict`, loads
and passes the system's checks; middleware reaching for the runtime's internals does not
type-check."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

from agency import AgentSystem
from agency.services.agents.system import load_system

ROOT = Path(__file__).resolve().parents[2]
SAMPLE = Path(__file__).with_name("sample_app.py")
MYPY = Path(sys.executable).parent / "mypy"


def mypy_strict(*files: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(MYPY), "--strict", *map(str, files)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_the_sample_app_imports_only_the_agents_api() -> None:
    imported = {
        node.module
        for node in ast.walk(ast.parse(SAMPLE.read_text()))
        if isinstance(node, ast.ImportFrom) and node.module
    }
    assert {m for m in imported if m.split(".")[0] == "agency"} == {"agency"}


def test_the_sample_app_passes_mypy_strict() -> None:
    done = mypy_strict(SAMPLE)
    assert done.returncode == 0, done.stdout + done.stderr


def test_middleware_reading_the_runtime_fold_does_not_type_check(tmp_path: Path) -> None:
    app = tmp_path / "peeking_app.py"
    app.write_text(
        "from agency import Middleware, MiddlewareContext, ModelPlan\n\n\n"
        "class Peek(Middleware):\n"
        "    async def before_model(self, ctx: MiddlewareContext, plan: ModelPlan) -> None:\n"
        "        print(ctx.state.position, ctx.state.command_keys)\n"
    )
    done = mypy_strict(app)
    assert done.returncode == 1
    assert '"ThreadView" has no attribute "position"' in done.stdout
    assert '"ThreadView" has no attribute "command_keys"' in done.stdout


def test_the_sample_app_loads_and_its_blueprints_check() -> None:
    system = load_system(f"{SAMPLE.relative_to(ROOT)}:system")
    assert isinstance(system, AgentSystem)
    assert {"adviser", "greeter"} <= set(system.blueprints)
    system.check()
