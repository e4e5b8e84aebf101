"""The Python client (async and sync) and the `agency threads` commands built on it, against
the whole system over HTTP."""

from __future__ import annotations

import asyncio
import os
import sys
from contextlib import aclosing
from pathlib import Path

import pytest

from agency.services.client import AgencyClient, ApiError, AsyncAgencyClient
from agency.services.llm.fake_scripts import ScriptStep
from tests.e2e.conftest import Client
from tests.helpers import assert_eventually

WAIT = 30.0


def key_of(client: Client) -> str:
    return client.http.headers["Authorization"].removeprefix("Bearer ")


def call(tool: str, **arguments: object) -> dict[str, object]:
    return {"name": tool, "arguments": arguments}


async def test_async_client_runs_follows_and_approves(client: Client) -> None:
    key = "client-hitl-" + client.agency
    client.llm.script(key, [
        ScriptStep(tool_calls=[call("lookup", word="x")]),
        ScriptStep(content="looked it up"),
    ])  # fmt: skip
    async with AsyncAgencyClient(str(client.http.base_url), key_of(client)) as api:
        blueprints = {b.name for b in await api.list_blueprints(client.agency)}
        assert {"worker", "approver"} <= blueprints
        thread = await api.create_thread(client.agency, "approver")
        run = await api.invoke(client.agency, thread.id, key)
        assert run.status in ("running", "paused")
        async with (
            asyncio.timeout(WAIT),
            aclosing(api.follow(client.agency, thread.id, run.run_id)) as events,
        ):
            seen = [event async for event in events]
        paused = [e for e in seen if e.type != "checkpoint.saved"][-1]
        assert paused.type == "run.paused" and paused.data["reason"] == "hitl"
        assert all(e.run_id == run.run_id for e in seen)
        (interrupt,) = [e for e in seen if e.type == "hitl.interrupt"]
        assert interrupt.data["proposedToolCalls"][0]["name"] == "lookup"

        await api.approve(client.agency, thread.id, True)
        after = seen[-1].seq + 1
        assert await api.wait(client.agency, thread.id, run.run_id, WAIT, after) == "completed"

        async def projected() -> None:  # read models follow the log
            state = await api.state(client.agency, thread.id)
            assert state.run.status == "completed"
            assert state.state.messages[-1].content == "looked it up"
            page = await api.events(client.agency, thread.id, types=["run.completed"])
            assert [e.data["runId"] for e in page.events] == [run.run_id]

        await assert_eventually(projected, timeout=WAIT)
        assert [t.id for t in await api.list_threads(client.agency)] == [thread.id]

        with pytest.raises(ApiError) as missing:
            await api.state(client.agency, "nothread")
        assert missing.value.status == 404 and "nothread" in missing.value.message


async def test_sync_client_runs_and_cancels(client: Client) -> None:
    key = "client-sync-" + client.agency
    client.llm.script(key, [ScriptStep(content="slow", delay_ms=10_000)])
    url, api_key = str(client.http.base_url), key_of(client)

    def scenario() -> tuple[str, str]:
        with AgencyClient(url, api_key) as api:
            thread = api.create_thread(client.agency, "worker")
            run = api.invoke(client.agency, thread.id, key)
            api.cancel(client.agency, thread.id, "no time")
            return run.status, api.wait(client.agency, thread.id, run.run_id, WAIT)

    # The server runs on this loop: the blocking client gets a thread of its own.
    started, ended = await asyncio.to_thread(scenario)
    assert started == "running" and ended == "canceled"


async def test_sync_client_terminates_a_thread(client: Client) -> None:
    key = "client-terminate-" + client.agency
    client.llm.script(key, [ScriptStep(content="slow", delay_ms=10_000)])
    url, api_key = str(client.http.base_url), key_of(client)

    def scenario() -> tuple[str, str, str, ApiError]:
        with AgencyClient(url, api_key) as api:
            thread = api.create_thread(client.agency, "worker")
            run = api.invoke(client.agency, thread.id, key)
            answer = api.terminate(client.agency, thread.id, "closing")
            ended = api.wait(client.agency, thread.id, run.run_id, WAIT)
            with pytest.raises(ApiError) as refused:
                api.invoke(client.agency, thread.id, "more")
            return run.status, answer.status, ended, refused.value

    started, answered, ended, refused = await asyncio.to_thread(scenario)
    assert (started, answered, ended) == ("running", "terminating", "canceled")
    assert refused.status == 409 and "is terminated (closing)" in refused.message


async def agency_cli(data_dir: Path, *args: str) -> tuple[int, str]:
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "agency.services.cli.main", "threads", *args, "--data-dir", str(data_dir),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
        env={**os.environ, "AGENCY_LOG_FORMAT": "console"},
    )  # fmt: skip
    async with asyncio.timeout(60):
        output, _ = await process.communicate()
    assert process.returncode is not None
    return process.returncode, output.decode()


async def test_threads_commands_create_invoke_follow_approve_and_list(
    client: Client, tmp_path: Path
) -> None:
    client.write_endpoints(tmp_path)
    key = "cli-hitl-" + client.agency
    client.llm.script(key, [
        ScriptStep(content="Let me look.", tool_calls=[call("lookup", word="cli")]),
        ScriptStep(content="found it"),
    ])  # fmt: skip
    code, created = await agency_cli(tmp_path, "create", "approver")
    assert code == 0, created
    thread = created.strip().splitlines()[-1]

    code, out = await agency_cli(tmp_path, "invoke", thread, key, "--follow")
    assert code == 0, out
    assert "▶ run" in out and "awaiting approval: lookup" in out
    assert f"⏸ paused (hitl); `agency threads approve {thread}`" in out, out

    code, out = await agency_cli(tmp_path, "approve", thread, "--follow")
    assert code == 0 and "approved" in out, out
    # The run goes on from the approval, not from the thread's start: no second pause shown.
    assert "✓ lookup" in out and "■ completed: found it" in out, out
    assert "▶ run" not in out and "awaiting approval" not in out, out
    code, out = await agency_cli(tmp_path, "ls")
    assert code == 0 and thread in out, out

    code, out = await agency_cli(tmp_path, "invoke", "nosuchthread", "hi")
    assert code == 1 and "no thread nosuchthread" in out, out
    code, out = await agency_cli(tmp_path, "terminate", thread, "--reason", "done")
    assert code == 0 and "terminate requested" in out, out


async def test_a_thread_created_with_a_message_starts_its_first_run(
    client: Client, tmp_path: Path
) -> None:
    """The client's and the command's create with a message: one request makes the thread
    and starts its run, which the answer names and a follow shows to its end."""
    key = "client-create-run-" + client.agency
    client.llm.script(key, [ScriptStep(content="answered at creation", delay_ms=500)])
    async with AsyncAgencyClient(str(client.http.base_url), key_of(client)) as api:
        thread = await api.create_thread(client.agency, "worker", text=key)
        assert thread.run_id is not None and thread.run_status in ("queued", "running")
        ended = await api.wait(client.agency, thread.id, thread.run_id, WAIT)
        assert ended == "completed"
        state = await api.state(client.agency, thread.id)
        assert [m.content for m in state.state.messages] == [key, "answered at creation"]
        plain = await api.create_thread(client.agency, "worker")
        assert plain.run_id is None and plain.run_status is None

    client.write_endpoints(tmp_path)
    cli_key = "cli-create-run-" + client.agency
    client.llm.script(cli_key, [ScriptStep(content="made and answered", delay_ms=500)])
    code, out = await agency_cli(tmp_path, "create", "worker", "--message", cli_key, "--follow")
    assert code == 0, out
    created = out.strip().splitlines()[0]
    assert out.rstrip().endswith("■ completed: made and answered"), out
    code, out = await agency_cli(tmp_path, "ls")
    assert code == 0 and created in out, out
    code, out = await agency_cli(tmp_path, "create", "worker", "--follow")
    assert code == 2 and "--follow and --key go with --message" in out, out


async def test_follow_goes_on_through_a_pause_for_subagents_and_says_it_resumes_by_itself(
    client: Client, tmp_path: Path
) -> None:
    client.write_endpoints(tmp_path)
    key = "cli-subagent-" + client.agency
    child = "sub-" + client.agency  # shorter than the parent's key: each keeps its own script
    task = call("task", description=f"{child} look it up", subagentType="worker")
    client.llm.script(key, [ScriptStep(tool_calls=[task]), ScriptStep(content="all reported")])
    client.llm.script(child, [ScriptStep(content="child done")])
    code, created = await agency_cli(tmp_path, "create", "manager")
    assert code == 0, created
    thread = created.strip().splitlines()[-1]

    code, out = await agency_cli(tmp_path, "invoke", thread, key, "--follow")
    assert code == 0, out
    assert "⏸ paused (subagent); it waits for its subagents and resumes by itself" in out, out
    assert "approve" not in out, out
    assert out.rstrip().endswith("■ completed: all reported"), out


async def test_a_run_out_of_steps_is_continued_by_the_invoke_its_pause_names(
    client: Client, tmp_path: Path
) -> None:
    client.write_endpoints(tmp_path)
    key = "cli-steps-" + client.agency
    ls = ScriptStep(tool_calls=[call("ls")])
    client.llm.script(key, [*[ls] * 8, ScriptStep(content="finished after all")])
    code, created = await agency_cli(tmp_path, "create", "worker")
    assert code == 0, created
    thread = created.strip().splitlines()[-1]

    code, out = await agency_cli(tmp_path, "invoke", thread, key, "--follow")
    assert code == 0, out
    hint = f"⏸ paused (exhausted); `agency threads invoke {thread} MESSAGE` continues it"
    assert hint in out and "approve" not in out, out

    code, out = await agency_cli(tmp_path, "invoke", thread, f"go on {key}", "--follow")
    assert code == 0 and "■ completed: finished after all" in out, out


@pytest.mark.slow
@pytest.mark.timeout(120)
async def test_follow_waits_through_the_streams_keep_alives(client: Client, tmp_path: Path) -> None:
    """A model answering after more than a keep-alive's interval (15 s): the follow reads
    the keep-alives and goes on to the end."""
    client.write_endpoints(tmp_path)
    key = "cli-slow-" + client.agency
    client.llm.script(key, [ScriptStep(content="took a while", delay_ms=17_000)])
    code, created = await agency_cli(tmp_path, "create", "worker")
    assert code == 0, created
    thread = created.strip().splitlines()[-1]

    code, out = await agency_cli(tmp_path, "invoke", thread, key, "--follow")
    assert code == 0 and "■ completed: took a while" in out, out
