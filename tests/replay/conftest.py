"""Real runs to replay: the runtime package's agent system over the session's NATS, and the
replay and projections commands run in-process against an endpoints.json of the test's own."""

from __future__ import annotations

import argparse
import contextlib
import io
import os
from dataclasses import dataclass
from pathlib import Path

import pytest
from structlog.testing import capture_logs

from agency.contracts.commands import CreateThread
from agency.contracts.events import ParentRef
from agency.contracts.ids import new_id
from agency.infra.endpoints import Endpoints, write_endpoints
from agency.services.cli import projections_cmd, replay_cmd
from agency.services.llm.fake_scripts import ScriptToolCall
from tests.helpers import assert_eventually
from tests.runtime.conftest import Agents, agents, llm  # noqa: F401

# Where a replay would find PostgreSQL if it looked: nothing listens there.
NOWHERE = "postgresql://agency:agency@127.0.0.1:9/nowhere?connect_timeout=1"


@pytest.fixture
def data_dir(tmp_path: Path, nats_url: str, tenant: str) -> Path:
    """An endpoints.json naming the session's NATS, the test's tenant and no database."""
    write_endpoints(
        tmp_path,
        Endpoints(pid=os.getpid(), nats_url=nats_url, database_url=NOWHERE, tenant_id=tenant),
    )
    return tmp_path


@dataclass(frozen=True)
class Ran:
    status: int
    out: str
    err: str

    @property
    def lines(self) -> list[str]:
        return self.out.splitlines()


async def cli(*argv: str) -> Ran:
    """Run an `agency` command of ours in this event loop, with what it printed (the logs of
    the services running beside it are kept out)."""
    parser = argparse.ArgumentParser(prog="agency")
    groups = parser.add_subparsers(dest="group", required=True)
    replay_cmd.register(groups)
    projections_cmd.register(groups)
    args = parser.parse_args(argv)
    out, err = io.StringIO(), io.StringIO()
    with capture_logs(), contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        status: int = await args.handler(args)
    return Ran(status, out.getvalue(), err.getvalue())


def call(name: str, **arguments: object) -> ScriptToolCall:
    """A tool call for a scripted model answer."""
    return ScriptToolCall(name=name, arguments=arguments)


def todos(*items: str) -> ScriptToolCall:
    return call("write_todos", todos=[{"content": i, "status": "in_progress"} for i in items])


async def child_thread(running: Agents, parent: str, agent_type: str = "worker") -> str:
    """A thread created as `parent`'s child, as the subagents coordinator would."""
    thread = new_id()
    await running.bus.commands.send(
        running.tenant,
        CreateThread(
            agency_id=running.agency,
            thread_id=thread,
            agent_type=agent_type,
            parent=ParentRef(thread_id=parent, token="tk" + new_id(), tool_call_id=None),
        ),
    )

    async def created() -> None:
        assert await running.bus.store.read(running.tenant, "thread", thread)

    await assert_eventually(created)
    return thread
