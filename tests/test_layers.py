"""The import contracts of `pyproject.toml` ([tool.importlinter]) hold: the layers of
docs/architecture.md, services that import no other service, an extension API
(`services.agents`) that imports no service (`lint-imports`), a domain that imports no
infrastructure and names no built-in tool; and no module imports itself round a circle of
imports."""

from __future__ import annotations

import ast
import subprocess
import sys
import tomllib
from pathlib import Path

import grimp

from agency.contracts.events import BlueprintSpec
from agency.services.agents.builtin.parent import NOTIFY_TOOL, STATUS_TOOL
from agency.services.agents.builtin.subagents import RESUMABLE_TOOLS, TASK_TOOL
from agency.services.agents.system import AgentSystem

ROOT = Path(__file__).resolve().parent.parent
LINT_IMPORTS = Path(sys.executable).parent / "lint-imports"


def test_the_import_contracts_are_kept() -> None:
    """`lint-imports` finds every contract kept, and no contract lists an exception."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    contracts = config["tool"]["importlinter"]["contracts"]
    assert [c["id"] for c in contracts if c.get("ignore_imports")] == []
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


def _circles(graph: grimp.ImportGraph) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    circles: list[list[str]] = []
    for root in sorted(graph.modules):
        if root in index:
            continue
        work = [(root, iter(sorted(graph.find_modules_directly_imported_by(root))))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            module, targets = work[-1]
            target = next(targets, None)
            if target is not None:
                if target not in index:
                    index[target] = low[target] = len(index)
                    stack.append(target)
                    on_stack.add(target)
                    imported = graph.find_modules_directly_imported_by(target)
                    work.append((target, iter(sorted(imported))))
                elif target in on_stack:
                    low[module] = min(low[module], index[target])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[module])
            if low[module] == index[module]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == module:
                        break
                if len(component) > 1:
                    circles.append(sorted(component))
    return circles


def test_no_module_imports_itself_round_a_circle() -> None:
    """No import circle between modules of `agency`, counting `TYPE_CHECKING` and in-function
    imports: each layer's modules form a tree, so a lower module never needs a higher one."""
    graph = grimp.build_graph("agency", cache_dir=None)
    circles = _circles(graph)
    assert circles == [], "import circles:\n" + "\n".join(" <-> ".join(c) for c in circles)


def test_the_circle_check_finds_a_circle() -> None:
    """The check reports two modules that import each other, and nothing else."""
    graph = grimp.ImportGraph()
    for module in ("a.low", "a.high", "a.leaf"):
        graph.add_module(module)
    graph.add_import(importer="a.low", imported="a.high")
    graph.add_import(importer="a.high", imported="a.low")
    graph.add_import(importer="a.high", imported="a.leaf")
    assert _circles(graph) == [["a.high", "a.low"]]


def test_no_module_imports_the_public_package() -> None:
    """`agency` re-exports the extension API for apps; the modules it re-exports from import
    where each name is defined, never `agency` itself."""
    graph = grimp.build_graph("agency", cache_dir=None)
    assert graph.find_modules_that_directly_import("agency") == set()


def test_the_domain_names_no_built_in_tool() -> None:
    """The fold and the decisions know events, not tools: no string in `domain/` is the
    name of a tool the built-in middleware brings."""
    system = AgentSystem().defaults()
    everything = BlueprintSpec(name="everything", tags=tuple(sorted(system.tags)))
    names = {*system.tools_for(everything), *system.registrable_for(everything)}
    names |= {NOTIFY_TOOL, STATUS_TOOL, TASK_TOOL, *RESUMABLE_TOOLS}
    assert "read_file" in names and "write_todos" in names
    named = [
        f"{path.name}:{node.lineno} {node.value!r}"
        for path in sorted((ROOT / "domain").glob("*.py"))
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.Constant) and node.value in names
    ]
    assert named == []
