"""The built wheel installs one top-level package, `agency`: an app with its own `services`
and `contracts` packages imports them and Agency side by side, in a fresh virtualenv."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import venv
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

APP = {
    "services/__init__.py": "NAME = 'the app services'\n",
    "contracts/__init__.py": "NAME = 'the app contracts'\n",
    "app.py": textwrap.dedent(
        """
        import asyncio

        import contracts
        import services
        from agency import AgentSystem, BlueprintSpec, tool
        from agency.testing import run_tool


        @tool
        async def shout(text: str) -> str:
            \"\"\"Say it louder.\"\"\"
            return text.upper()


        system = AgentSystem().add_tool(shout, ["loud"]).add_agent(
            BlueprintSpec(name="shouter", prompt="Shout.", tags=("loud",))
        )

        if __name__ == "__main__":
            result = asyncio.run(run_tool(system, "shout", {"text": "hello"}))
            print(services.NAME, "|", contracts.NAME, "|", result.output)
        """
    ),
}


def run(*argv: str | Path, cwd: Path, timeout: float = 300) -> str:
    done = subprocess.run(
        [str(a) for a in argv], cwd=cwd, capture_output=True, text=True, timeout=timeout
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    run(sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps",
        "-w", out, ROOT, cwd=out)  # fmt: skip
    (built,) = out.glob("agency-*.whl")
    return built


def test_the_wheel_installs_only_the_agency_package(wheel: Path) -> None:
    names = zipfile.ZipFile(wheel).namelist()
    tops = {n.split("/")[0] for n in names if not n.split("/")[0].endswith(".dist-info")}
    assert tops == {"agency"}
    assert "agency/services/runtime/service.py" in names
    assert "agency/infra/migrations/001_projection_checkpoints.sql" in names
    assert "agency/services/api/console/static/index.html" in names


def test_an_app_with_its_own_services_package_runs_beside_agency(
    wheel: Path, tmp_path: Path
) -> None:
    env_dir = tmp_path / "venv"
    venv.create(env_dir, with_pip=False)
    python = env_dir / "bin" / "python"
    site = Path(run(python, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))",
                    cwd=tmp_path).strip())  # fmt: skip
    # Agency's dependencies from this environment, but not its own checkout: a path in a
    # .pth file is put on sys.path without the .pth files inside it (the editable install's).
    deps = [p for p in sys.path if p.endswith("site-packages")]
    (site / "deps.pth").write_text("".join(f"{p}\n" for p in deps))
    run(sys.executable, "-m", "pip", "--python", python, "install", "--quiet", "--no-deps",
        "--no-index", wheel, cwd=tmp_path)  # fmt: skip
    app = tmp_path / "app"
    for name, text in APP.items():
        (app / name).parent.mkdir(parents=True, exist_ok=True)
        (app / name).write_text(text)

    out = run(python, "app.py", cwd=app)
    assert out.strip() == "the app services | the app contracts | HELLO"
    where = run(python, "-c", "import agency; print(agency.__file__)", cwd=app)
    assert where.startswith(str(site))
    assert "usage: agency" in run(env_dir / "bin" / "agency", "--help", cwd=app)


def test_the_wheel_carries_the_licence_and_the_version(wheel: Path) -> None:
    import tomllib

    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    assert wheel.name.startswith(f"agency-{version}-")
    names = zipfile.ZipFile(wheel).namelist()
    meta = zipfile.ZipFile(wheel).read(f"agency-{version}.dist-info/METADATA").decode()
    assert "License-Expression: Apache-2.0" in meta.splitlines()
    assert f"agency-{version}.dist-info/licenses/LICENSE" in names
    assert f"## {version}" in (ROOT / "CHANGELOG.md").read_text()
