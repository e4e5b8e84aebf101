"""The README's and the docs' commands, run as a person types them, in a fresh copy.

A fenced block is taken when its info string says so: ```` ```python file=NAME ```` is saved
as NAME, ```` ```sh runnable ```` is run by bash (each line in turn, one shell for the block;
it must end with 0), ```` ```sh runnable=background ```` starts a server in a terminal of
its own and waits until it prints a line beginning with `ready`. ```` ```jsx file=NAME
page=MESSAGE ```` is a page: saved, bundled with its npm packages as Vite would (the
`VITE_AGENCY_URL` and `VITE_AGENCY_KEY` of its `.env` being the running system's URL and
key), served on an origin of its own and opened in Debian's chromium, where MESSAGE (URL-encoded)
is typed into its input and sent; its text is then read as a block's output. The copy is a
clone of the repository with the working tree's edits on top, sharing this virtual
environment (`./run` then installs nothing) and the npm packages tests/js pins (what
`npm install` of the packages a document names gives); its servers are stopped with
Ctrl-C (SIGINT) at the end.

The app author's guide (`docs/extending.md`) has nothing but such blocks: its examples are
files, imported by its tests, which a runnable block runs with pytest; and it gives every
public method of `agency.Middleware` with its signature as the code has it.
"""

from __future__ import annotations

import functools
import http.server
import inspect
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote

import pytest
from playwright.sync_api import sync_playwright

from tests.browser import CHROMIUM, CHROMIUM_ARGS

REPO = Path(__file__).resolve().parents[2]
_FENCE = re.compile(r"^```(\w+)([^\n]*)\n(.*?)^```$", re.MULTILINE | re.DOTALL)
_READY_TIMEOUT = 300.0
_BLOCK_TIMEOUT = 300.0
_STOP_TIMEOUT = 60.0
_PAGE_TIMEOUT_MS = 30_000
_NODE_MODULES = REPO / "tests" / "js" / "node_modules"
# What a person would see; a document not listed here only has to run without failing.
_EXPECTED = {
    "README.md": [
        "✋ awaiting approval: multiply",
        "⏸ paused (hitl)",
        "approved",
        "✓ multiply: 42",
        "■ completed:",
        "tool.output",
    ],
    # The app author's guide: its examples' own tests, one count for all of them.
    "extending.md": [
        "⏸ paused (subagent)",
        "has retur […]",  # the report as the guide's own on_child_report cuts it
        "subagents/",
        "10 passed",
    ],
    "frontends.md": [
        "ai: Done. write_todos answered",  # the JS SDK
        "messages",
        "info: ok",  # Agent Chat UI's first requests
        "http://localhost:3000",  # the preflight answered for its origin
    ],
    "protocols.md": [
        "tool: write_todos",  # AG-UI's HttpAgent
        "finished: success",
        "assistant: Done. write_todos answered",
        # The AI SDK's transport and stream reader against /aisdk.
        "tool-write_todos: output-available",
        "text: Done. write_todos answered",
        "TASK_STATE_COMPLETED",  # A2A: the a2a-sdk client's task
        "run.ended completed True",  # a webhook delivery, verified by `standardwebhooks`
        "versions: 2026-07-28",  # MCP: the SDK's `server/discover`
        "run: completed",
        "# Notes",  # the thread's notes.md, read as a resource
        "prompts: ",  # the blueprints, listed as prompts
        "assistant",
    ],
}
# Documents every fenced block of which is run: none is left as an example that may rot.
_ALL_RUN = ("extending.md",)
# What a page shows once it has its answer: the runner waits for each of these.
_PAGE_SHOWS = {"frontends.md": ["ai: Done. write_todos answered"]}


@dataclass(frozen=True)
class Block:
    language: str
    attributes: dict[str, str]
    text: str


def blocks(document: Path) -> list[Block]:
    """The blocks of `document` that the test acts on, in order."""
    found: list[Block] = []
    for language, info, text in _FENCE.findall(document.read_text()):
        attributes = {
            name: value for name, _, value in (word.partition("=") for word in info.split())
        }
        if "file" in attributes or "runnable" in attributes:
            found.append(Block(language, attributes, text))
    return found


def documents() -> list[Path]:
    return [path for path in [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
            if blocks(path)]  # fmt: skip


def fresh_copy(target: Path) -> Path:
    """A clone of the repository with the working tree's changes and new files on top."""
    subprocess.run(["git", "clone", "--quiet", str(REPO), str(target)], check=True, timeout=120)
    changed = subprocess.run(
        ["git", "ls-files", "--modified", "--others", "--exclude-standard", "-z"],
        cwd=REPO, check=True, capture_output=True, text=True, timeout=60,
    ).stdout.split("\0")  # fmt: skip
    for name in filter(None, changed):
        source = REPO / name
        if source.is_file():
            (target / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target / name)
    return target


def shared_venv(copy: Path) -> None:
    """The copy uses this environment, when `./run` would find it current for the copy."""
    venv = Path(sys.prefix)
    stamp = (venv / ".installed").read_text().strip() if (venv / ".installed").exists() else ""
    digest = subprocess.run(["sha256sum", str(copy / "pyproject.toml")], check=True,
                            capture_output=True, text=True).stdout.split()[0]  # fmt: skip
    if stamp != digest:
        pytest.fail(f"{venv} is not the environment `./run` made for this pyproject.toml; "
                    "run the tests with `./run test`")  # fmt: skip
    (copy / ".venv").symlink_to(venv)


def user_env() -> dict[str, str]:
    """A person's shell: none of the test run's settings, no provider keys."""
    env = {name: value for name, value in os.environ.items()
           if not name.startswith(("AGENCY_", "OPENAI_", "PYTEST", "NATS_", "DATABASE_"))}  # fmt: skip
    env["AGENCY_API_PORT"] = "0"  # a free port: the machine may have 8080 taken
    return env


class Terminal:
    """A server started as a person would in a terminal of its own."""

    def __init__(self, command: str, cwd: Path, log: Path) -> None:
        self.log = log
        self._out = log.open("wb")
        self.process = subprocess.Popen(
            ["bash", "-c", command], cwd=cwd, env=user_env(), stdout=self._out,
            stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip

    def wait_ready(self) -> None:
        deadline = _READY_TIMEOUT
        while deadline > 0:
            if re.search(r"(?m)^ready\b", self.log.read_text(errors="replace")):
                return
            if self.process.poll() is not None:
                break
            try:
                self.process.wait(timeout=0.5)
            except subprocess.TimeoutExpired:
                deadline -= 0.5
        pytest.fail(f"never ready:\n{self.log.read_text(errors='replace')[-4000:]}")

    def stop(self) -> bool:
        """Ctrl-C, as a person would; SIGKILL if it does not stop in time. Whether it
        stopped on Ctrl-C."""
        try:
            os.killpg(self.process.pid, signal.SIGINT)
            self.process.wait(timeout=_STOP_TIMEOUT)
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(timeout=10)
            return False
        except ProcessLookupError:
            pass
        finally:
            self._out.close()
        # A shell's answer to Ctrl-C is 130 (128 + SIGINT).
        return self.process.returncode in (0, 128 + signal.SIGINT)


def shared_node_modules(copy: Path) -> None:
    """The copy's `node_modules`: the packages tests/js pins (`npm ci`, see .ci/run)."""
    if not _NODE_MODULES.is_dir():
        pytest.fail("tests/js has no node_modules: npm ci --prefix tests/js --ignore-scripts")
    (copy / "node_modules").symlink_to(_NODE_MODULES)


@contextmanager
def served(root: Path) -> Iterator[str]:
    """`root` over HTTP at localhost: an origin other than the API's (127.0.0.1)."""
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(root))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://localhost:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def run_page(copy: Path, entry: str, message: str, shows: list[str]) -> str:
    """Bundle the page, open it, send `message`, wait until it shows each of `shows`."""
    endpoints = json.loads((copy / ".agency" / "endpoints.json").read_text())
    out = copy.parent / "page"
    env = {**user_env(), "VITE_AGENCY_URL": endpoints["api_url"],
           "VITE_AGENCY_KEY": endpoints["api_key"]}  # fmt: skip
    subprocess.run(["node", str(REPO / "tests" / "js" / "build.mjs"), entry, str(out)],
                   cwd=copy, env=env, check=True, timeout=120)  # fmt: skip
    problems: list[str] = []
    with served(out) as url, sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=CHROMIUM, args=CHROMIUM_ARGS, timeout=30_000
        )
        try:
            page = browser.new_page()
            page.on("pageerror", lambda e: problems.append(f"page error: {e}"))
            page.on("console", lambda m: problems.append(f"console {m.type}: {m.text}"))
            page.goto(f"{url}/index.html")
            page.fill("input", message)
            page.press("input", "Enter")
            wanted = json.dumps(shows)
            try:
                page.wait_for_function(
                    f"() => {wanted}.every((s) => document.body.innerText.includes(s))",
                    timeout=_PAGE_TIMEOUT_MS,
                )
            except Exception as error:
                text = page.inner_text("body")
                pytest.fail(
                    f"{entry} never showed {shows}: {error}\n{text}\n" + "\n".join(problems)
                )
            return page.inner_text("body")
        finally:
            browser.close()


@pytest.fixture
def copy(tmp_path: Path) -> Path:
    target = fresh_copy(tmp_path / "agency")
    shared_venv(target)
    return target


def needs_npm(document: Path) -> bool:
    """Whether a document's files import npm packages (JavaScript files)."""
    names = [b.attributes.get("file", "") for b in blocks(document)]
    return any(name.endswith((".js", ".mjs", ".jsx")) for name in names)


@pytest.mark.parametrize("document", documents(), ids=lambda path: path.name)
def test_a_documents_commands_run_as_written(document: Path, copy: Path) -> None:
    terminals: list[Terminal] = []
    stopped: list[bool] = []
    output: list[str] = []
    if needs_npm(document):
        shared_node_modules(copy)
    try:
        for number, block in enumerate(blocks(document)):
            if "file" in block.attributes:
                (copy / block.attributes["file"]).write_text(block.text)
                if "page" in block.attributes:
                    shows = _PAGE_SHOWS.get(document.name, [])
                    message = unquote(block.attributes["page"])
                    output.append(run_page(copy, block.attributes["file"], message, shows))
            elif block.attributes["runnable"] == "background":
                terminal = Terminal(block.text, copy, copy.parent / f"terminal-{number}.log")
                terminals.append(terminal)
                terminal.wait_ready()
            else:
                ran = subprocess.run(
                    ["bash", "-euo", "pipefail", "-c", block.text], cwd=copy, env=user_env(),
                    capture_output=True, text=True, timeout=_BLOCK_TIMEOUT,
                )  # fmt: skip
                shown = ran.stdout + ran.stderr
                assert ran.returncode == 0, f"{document.name}:\n{block.text}\n{shown}"
                output.append(shown)
    finally:
        stopped = [terminal.stop() for terminal in reversed(terminals)]
    printed = "\n".join(output)
    for expected in _EXPECTED.get(document.name, []):
        assert expected in printed, f"{document.name}: {expected!r} not in\n{printed}"
    for terminal, clean in zip(reversed(terminals), stopped, strict=True):
        assert clean, terminal.log.read_text(errors="replace")[-4000:]


def test_the_readme_has_runnable_blocks() -> None:
    """The README's first agent is run by the test above, not left out by a typo."""
    kinds = [b.attributes.get("runnable", "file") for b in blocks(REPO / "README.md")]
    assert kinds == ["file", "background", ""], kinds


@pytest.mark.parametrize("name", _ALL_RUN)
def test_every_block_of_the_guide_is_run(name: str) -> None:
    """A block without `file=` or `runnable` would be shown and never run."""
    document = REPO / "docs" / name
    fences = _FENCE.findall(document.read_text())
    unrun = [f"```{language}{info}" for language, info, _ in fences
             if not any(word.partition("=")[0] in ("file", "runnable") for word in info.split())]  # fmt: skip
    assert fences and not unrun, f"{name}: blocks that are not run: {unrun}"
    openings = len(re.findall(r"^```", document.read_text(), re.M))
    assert openings == 2 * len(fences), f"{name}: a block without a language is never run"
    files = [b.attributes["file"] for b in blocks(document) if "file" in b.attributes]
    commands = " ".join(b.text for b in blocks(document) if "runnable" in b.attributes)
    tests = [f for f in files if f.startswith("test_")]
    missing = [f for f in tests if f not in commands]
    assert not missing, f"{name}: test files no runnable block runs: {missing}"
    imported = "\n".join(b.text for b in blocks(document) if "file" in b.attributes)
    untested = [f for f in files if f not in tests
                and not re.search(rf"^from {re.escape(f.removesuffix('.py'))} import", imported, re.M)]  # fmt: skip
    assert not untested, f"{name}: files no block imports: {untested}"


def hook_signatures() -> dict[str, str]:
    """Each public method of `agency.Middleware`, as the guide writes it."""
    from agency import Middleware

    found = {}
    for name, value in vars(Middleware).items():
        if name.startswith("_") or not inspect.isfunction(value):
            continue
        signature = str(inspect.signature(value)).replace("'", "")
        prefix = "async def" if inspect.iscoroutinefunction(value) else "def"
        found[name] = f"{prefix} {name}{signature}"
    return found


def test_the_guide_names_every_hook_with_its_signature() -> None:
    """A hook added to `Middleware`, or one whose signature changes, fails here until
    `docs/extending.md` says so."""
    text = (REPO / "docs" / "extending.md").read_text().replace("\\|", "|")
    signatures = hook_signatures()
    assert {"before_model", "on_model_result", "on_child_report"} <= set(signatures)
    missing = [s for s in signatures.values() if f"`{s}`" not in text]
    assert not missing, f"docs/extending.md does not give these hooks as written: {missing}"
