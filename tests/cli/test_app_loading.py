"""`--app`: an agent system from a module of the current directory or from a file."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path

import pytest

from agency.contracts.ids import new_id
from agency.infra.endpoints import Endpoints, write_endpoints
from agency.infra.jetstream.connection import Bus
from agency.services.agents.system import AgentSystem, SystemLoadError, load_system

REPO = Path(__file__).resolve().parents[2]
# The command a person runs: the installed script, whose import path does not hold the
# current directory (unlike `python -m`).
AGENCY = str(Path(sys.executable).with_name("agency"))

APP = """
from agency.contracts.events import BlueprintSpec
from agency.services.agents.system import AgentSystem

system = AgentSystem().defaults().add_agent(BlueprintSpec(name="mine", tags=("default",)))
"""


@pytest.fixture
def isolated_imports(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """The test's own folder as the current directory; sys.path restored afterwards."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", list(sys.path))
    return tmp_path


def _module(folder: Path, source: str) -> str:
    name = "app_" + new_id().lower()
    (folder / f"{name}.py").write_text(source)
    return name


def test_a_module_of_the_current_directory_loads(isolated_imports: Path) -> None:
    name = _module(isolated_imports, APP)
    system = load_system(f"{name}:system")
    assert isinstance(system, AgentSystem) and "mine" in system.blueprints


def test_a_file_path_loads_and_may_import_its_neighbours(isolated_imports: Path) -> None:
    folder = isolated_imports / "apps"
    folder.mkdir()
    helper = _module(folder, 'PROMPT = "from a neighbour"\n')
    app = APP.replace("tags=", f"prompt=__import__({helper!r}).PROMPT, tags=")
    (folder / "agents_file.py").write_text(app)
    system = load_system("apps/agents_file.py:system")
    assert system.blueprints["mine"].prompt == "from a neighbour"


@pytest.mark.parametrize(
    ("app", "says"),
    [
        ("no_such_module_here:system", "No module named 'no_such_module_here' in the current"),
        ("missing/app.py:system", "no file"),
        ("agency.services.agents.default:nothing", "has no attribute 'nothing'"),
        ("agency.services.agents.default", "expected 'package.module:attribute'"),
    ],
    ids=["missing-module", "missing-file", "missing-attribute", "no-attribute"],
)
def test_a_failing_load_says_what_and_why(isolated_imports: Path, app: str, says: str) -> None:
    with pytest.raises(SystemLoadError, match=says.replace("(", r"\(")):
        load_system(app)


def test_a_module_importing_what_is_missing_names_that(isolated_imports: Path) -> None:
    name = _module(isolated_imports, "import weather_sdk_not_installed\n")
    with pytest.raises(SystemLoadError) as failed:
        load_system(f"{name}:system")
    assert str(failed.value) == (
        f"cannot load agent system '{name}:system': import failed: {name}.py, line 1, in "
        "<module>: ModuleNotFoundError: No module named 'weather_sdk_not_installed'"
    )


RAISES = """\
import json

SETTINGS = {"present": 1}


def setting(key):
    return SETTINGS[key]


TIMEOUT = setting("missing")
"""


def test_a_module_that_raises_on_import_names_the_line_in_the_apps_code(
    isolated_imports: Path,
) -> None:
    """The innermost line of the app's own file, not the line that imported it."""
    name = _module(isolated_imports, RAISES)
    with pytest.raises(SystemLoadError) as failed:
        load_system(f"{name}:system")
    assert str(failed.value) == (
        f"cannot load agent system '{name}:system': import failed: "
        f"{name}.py, line 7, in setting: KeyError: 'missing'"
    )


def test_a_file_that_raises_on_import_names_its_line(isolated_imports: Path) -> None:
    folder = isolated_imports / "apps"
    folder.mkdir()
    (folder / "calc.py").write_text(RAISES.replace('setting("missing")', "SETTINGS['missing']"))
    with pytest.raises(SystemLoadError) as failed:
        load_system("apps/calc.py:system")
    assert str(failed.value) == (
        "cannot load agent system 'apps/calc.py:system': import failed: "
        "apps/calc.py, line 10, in <module>: KeyError: 'missing'"
    )


def test_a_library_error_names_the_apps_line_that_called_it(isolated_imports: Path) -> None:
    name = _module(isolated_imports, 'import json\n\nCONFIG = json.loads("{oops")\n')
    with pytest.raises(SystemLoadError) as failed:
        load_system(f"{name}:system")
    assert f"import failed: {name}.py, line 3, in <module>: JSONDecodeError: " in str(failed.value)


def test_a_syntax_error_names_its_file_and_line(isolated_imports: Path) -> None:
    name = _module(isolated_imports, "x = 1\n\ndef broken(:\n    pass\n")
    for app in (f"{name}:system", f"{name}.py:system"):
        with pytest.raises(SystemLoadError) as failed:
            load_system(app)
        assert str(failed.value) == (
            f"cannot load agent system '{app}': import failed: "
            f"{name}.py, line 3: SyntaxError: invalid syntax"
        )


def test_a_factory_that_raises_names_its_line(isolated_imports: Path) -> None:
    name = _module(isolated_imports, "def system():\n    return 1 / 0\n")
    with pytest.raises(SystemLoadError) as failed:
        load_system(f"{name}:system")
    assert str(failed.value) == (
        f"cannot load agent system '{name}:system': system() failed: "
        f"{name}.py, line 2, in system: ZeroDivisionError: division by zero"
    )


async def agency(cwd: Path, *args: str) -> tuple[int, str]:
    proc = await asyncio.create_subprocess_exec(
        AGENCY, *args, cwd=cwd, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )
    _, err = await asyncio.wait_for(proc.communicate(), timeout=60)
    return proc.returncode or 0, err.decode()


@pytest.mark.parametrize("where", ["module", "file", "example"])
async def test_replay_loads_the_app_from_the_current_directory(
    tmp_path: Path, bus: Bus, nats_url: str, tenant: str, where: str
) -> None:
    del bus  # the streams exist
    data = tmp_path / "data"
    data.mkdir()
    write_endpoints(
        data, Endpoints(pid=os.getpid(), nats_url=nats_url, database_url="", tenant_id=tenant)
    )
    (tmp_path / "myagents.py").write_text(APP)
    app, cwd = {
        "module": ("myagents:system", tmp_path),
        "file": (str(tmp_path / "myagents.py") + ":system", REPO),
        "example": ("examples.code_agent:system", REPO),
    }[where]
    thread = new_id()
    code, err = await agency(cwd, "replay", thread, "--re-execute", "--app", app,
                             "--data-dir", str(data))  # fmt: skip
    # The app loaded: what stops the command is the thread it was asked for.
    assert code == 2, err[-1500:]
    assert (code, err.strip()) == (2, f"agency: thread {thread} has no events in tenant "
                                      f"{tenant}: check the id and --tenant")  # fmt: skip


async def test_up_with_an_app_that_cannot_load_exits_with_one_line(tmp_path: Path) -> None:
    (tmp_path / "broken.py").write_text('raise RuntimeError("no API key for the weather")\n')
    data = str(tmp_path / "data")
    code, err = await agency(tmp_path, "up", "--app", "broken:system", "--data-dir", data)
    assert code == 2
    assert err == (
        "agency: cannot load agent system 'broken:system': import failed: "
        "broken.py, line 1, in <module>: RuntimeError: no API key for the weather\n"
    )
    code, err = await agency(tmp_path, "up", "--app", "gone/app.py:system", "--data-dir", data)
    assert (code, err) == (
        2,
        f"agency: cannot load agent system 'gone/app.py:system': no file {tmp_path}/gone/app.py\n",
    )


async def test_up_refuses_static_blueprints_naming_what_the_system_does_not_have(
    tmp_path: Path,
) -> None:
    (tmp_path / "typo.py").write_text(APP.replace('tags=("default",)', 'tags=("defualt",)'))
    data = str(tmp_path / "data")
    code, err = await agency(tmp_path, "up", "--app", "typo:system", "--data-dir", data)
    assert (code, err) == (
        2,
        "agency: cannot load agent system 'typo:system': blueprint 'mine': field 'tags': "
        "unknown tag 'defualt' (the tags of this agent system: default, fs, hitl, planning, "
        "subagents, workflow)\n",
    )
    blueprints = tmp_path / "blueprints.json"
    blueprints.write_text('[{"name": "filed", "config": {"hitl": {"tools": ["send"]}}}]')
    code, err = await agency(tmp_path, "up", "--blueprints", str(blueprints), "--data-dir", data)
    assert code == 2
    assert err.startswith(
        "agency: blueprint 'filed': field 'config.hitl.tools': 'send' is no tool of this "
        "blueprint (its tools: "
    )
    inline = {"name": "lead", "config": {"subagents": {"subagents": [
        {"name": "scout", "prompt": "Look.", "tags": ["defualt"]}]}}}  # fmt: skip
    blueprints.write_text(json.dumps([inline]))
    code, err = await agency(tmp_path, "up", "--blueprints", str(blueprints), "--data-dir", data)
    assert code == 2
    assert err.startswith(
        "agency: blueprint 'lead': field 'config.subagents.subagents[0].tags': unknown tag "
        "'defualt' (the tags of this agent system: "
    )
