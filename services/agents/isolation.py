"""`Isolation`: what an operator grants a tool or a code agent that runs in a sandbox.

An external tool registered with an `Isolation` (`AgentSystem.add_tool(..., isolation=...)`)
is run by the tools service in a worker process started under bubblewrap
(`services/tools/sandbox.py`): no network unless `network`, only the environment in `env`,
the interpreter and the project code read-only, a private scratch directory, and limits on
CPU time, memory and scratch space. The tool's function is imported in that process by its
module and qualified name, so it must be defined at a module's top level. A code agent
registered with one (`AgentSystem.code_agent(..., isolation=...)`) runs its `on_message` in
such a worker too (`services/runtime/code_isolated.py`), its class imported the same way.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

MIB = 1024 * 1024


class NotIsolatable(ValueError):
    """A tool whose function (or a code agent whose class) a sandboxed process could not
    import."""

    def __init__(self, tool: str, problem: str, *, what: str = "tool") -> None:
        self.tool = tool
        super().__init__(f"{what} {tool!r} cannot be isolated: {problem}")


@dataclass(frozen=True, slots=True)
class Isolation:
    """The sandbox of one isolated tool; the defaults are its limits unless raised here.

    - `network`: share the host's network (a tool that calls an API); without it the tool
      has a network namespace of its own with nothing in it but a loopback of its own.
    - `env`: the whole environment the tool sees (none of the service's variables).
    - `cpu_seconds`: CPU time of the worker process (whole seconds), then it is killed.
    - `memory_mib`: address space of the worker process; an allocation past it fails.
    - `scratch_mib`: size of the scratch directory, the tool's working directory (and /tmp).

    - `wall_seconds`: for a code agent, the wall time of one run of its handler; a tool's
      is its `timeout`, as for every tool.
    """

    network: bool = False
    env: Mapping[str, str] = field(default_factory=dict)
    cpu_seconds: int = 10
    memory_mib: int = 256
    scratch_mib: int = 64
    wall_seconds: int = 300

    def __post_init__(self) -> None:
        for name in ("cpu_seconds", "memory_mib", "scratch_mib", "wall_seconds"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"Isolation.{name} must be a positive whole number, not {value!r}")
        for key, value in self.env.items():
            if not isinstance(key, str) or not isinstance(value, str) or not key or "=" in key:
                raise ValueError(f"Isolation.env must map names to strings; {key!r} does not")

    @property
    def memory_bytes(self) -> int:
        return self.memory_mib * MIB


def function_reference(name: str, fn: Callable[..., Any]) -> tuple[str, str]:
    """`(module, qualified name)` by which a sandboxed process imports the tool's function.

    Raises `NotIsolatable` for a function no import can reach (a lambda, a closure, a
    function defined in a `__main__` script or replaced at its name by something else).
    """
    module = getattr(fn, "__module__", None)
    qualname = getattr(fn, "__qualname__", None)
    if not isinstance(module, str) or not isinstance(qualname, str):
        raise NotIsolatable(name, "its function has no module and qualified name")
    if module == "__main__":
        raise NotIsolatable(name, "its function is defined in a script, not an importable module")
    if "<" in qualname:
        raise NotIsolatable(name, f"its function {qualname} is not defined at a module's top level")
    try:
        found = resolve(module, qualname)
    except (ImportError, AttributeError) as e:
        raise NotIsolatable(name, f"{module}:{qualname} cannot be imported ({e})") from e
    if found is not fn:
        raise NotIsolatable(name, f"{module}:{qualname} names another object than its function")
    return module, qualname


def class_reference(name: str, cls: type) -> tuple[str, str]:
    """`(module, qualified name)` by which a sandboxed process imports a code agent's class.

    Raises `NotIsolatable` for a class no import can reach (defined in a function, in a
    `__main__` script, or replaced at its name by something else).
    """
    module, qualname = cls.__module__, cls.__qualname__
    if module == "__main__":
        raise NotIsolatable(name, "its class is defined in a script, not an importable module",
                            what="code agent")  # fmt: skip
    if "<" in qualname:
        raise NotIsolatable(
            name, f"its class {qualname} is not defined at a module's top level", what="code agent"
        )
    try:
        found = resolve_class(module, qualname)
    except (ImportError, AttributeError) as e:
        raise NotIsolatable(
            name, f"{module}:{qualname} cannot be imported ({e})", what="code agent"
        ) from e
    if found is not cls:
        raise NotIsolatable(
            name, f"{module}:{qualname} names another object than its class", what="code agent"
        )
    return module, qualname


def resolve_class(module: str, qualname: str) -> type:
    """The class at `module:qualname`."""
    value: Any = importlib.import_module(module)
    for part in qualname.split("."):
        value = getattr(value, part)
    if not isinstance(value, type):
        raise AttributeError(f"{module}:{qualname} is not a class")
    return value


def resolve(module: str, qualname: str) -> Callable[..., Any]:
    """The function at `module:qualname`; a `Tool` there (a `define_tool` decorator) gives its
    function."""
    value: Any = importlib.import_module(module)
    for part in qualname.split("."):
        value = getattr(value, part)
    fn = getattr(value, "fn", value)
    if not callable(fn):
        raise AttributeError(f"{module}:{qualname} is not callable")
    return fn  # type: ignore[no-any-return]
