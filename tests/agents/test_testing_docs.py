"""`docs/testing-apps.md`'s example is run as it is written."""

from __future__ import annotations

import inspect
import re
import types
from pathlib import Path

DOC = Path(__file__).resolve().parents[2] / "docs" / "testing-apps.md"
BLOCK = re.compile(r"```python\n(# test_forecaster\.py\n.*?)```", re.S)


async def test_the_documented_example_runs_and_its_tests_pass() -> None:
    found = BLOCK.search(DOC.read_text())
    assert found is not None, f"{DOC} has no python block starting with # test_forecaster.py"
    module = types.ModuleType("test_forecaster")
    exec(compile(found.group(1), str(DOC), "exec"), module.__dict__)
    tests = [f for name, f in vars(module).items() if name.startswith("test_")]
    assert len(tests) == 2
    for test in tests:
        assert inspect.iscoroutinefunction(test)
        await test()
