"""The workload of `just bench agent` (`bench/agent.py`), as both sides run it (the script
key, the agent's model and prompt, its tool's word and output, the question and the expected
answer), and the benchmark's own settings."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

RunFn = Callable[[int], Awaitable[None]]

SCRIPT_KEY = "bench-agent-script"
MODEL = "fake-model"
AGENT = "bench"
PROMPT = "You are a benchmark agent. Look words up before you answer."
WORD = "agent"
TOOL_OUTPUT = f"definition of {WORD}"
ANSWER = "An agent is one who acts: that is what the lookup says."
LANGGRAPH_DATABASE = "langgraph_bench"
LANGGRAPH_POOL = 20

WARMUP_RUNS = 10
SETUP_TIMEOUT = 60.0
STOP_TIMEOUT = 15.0


class BenchError(Exception):
    """The benchmark could not measure what it claims: a run failed or never ended."""


def question(index: int) -> str:
    return f"{SCRIPT_KEY}: what does the word {WORD!r} mean? (run {index})"


def phase_timeout(runs: int) -> float:
    return 30.0 + 0.5 * runs
