"""The running-agents fixtures of the runtime tests."""

from tests.runtime.conftest import llm  # noqa: F401
from tests.spans import spans  # noqa: F401
