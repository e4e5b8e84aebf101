"""`agency workflow run|ls|stop`, `agency send`, `agency peek`, `agency schedules ls`:
workflows through the HTTP API of a running system (`agency workflow replay` reads the log:
`services/workflows/cli/replay_cmd.py`).

Targets are the seed's: `@review:pr-1` (a workflow and its tag), `@review`, `@global`
(every agency's workflow of standalone agents).
"""

from __future__ import annotations

import argparse
import json
import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agency.services.cli.arguments import (
    add_app,
    add_data_dir,
    add_replay_options,
    error_message,
    running_endpoints,
)

if TYPE_CHECKING:
    import httpx

DEFAULT_AGENCY = "default"


class WorkflowCliError(Exception):
    pass


def register(groups: Any) -> None:
    workflow = groups.add_parser("workflow", help="run, list and stop workflows")
    verbs = workflow.add_subparsers(dest="verb", required=True, metavar="VERB")
    run = verbs.add_parser("run", help="create a workflow from a YAML file and show its channel")
    run.add_argument("file", type=Path, help="the workflow definition (YAML)")
    run.add_argument("--tag", default="", help="the instance tag (@name:tag)")
    run.add_argument("--message", default=None, help="what to post instead of the kickoff")
    run.add_argument(
        "--input", action="append", default=[], metavar="KEY=VALUE", help="${{ inputs.KEY }}"
    )
    run.add_argument("--timeout", type=float, default=300.0, help="seconds to wait for quiet")
    _common(run)
    run.set_defaults(handler=workflow_run)
    ls = verbs.add_parser("ls", help="the agency's workflows")
    _common(ls)
    ls.set_defaults(handler=workflow_ls)
    stop = verbs.add_parser("stop", help="stop a workflow's run")
    stop.add_argument("target", help="@name or @name:tag")
    _common(stop)
    stop.set_defaults(handler=workflow_stop)
    _register_replay(verbs)

    send = groups.add_parser("send", help="post to a workflow's channel: send @wf:tag @agent TEXT")
    send.add_argument("target", help="@name:tag, @name or @global")
    send.add_argument("words", nargs="+", help="@members to address, then the message")
    _common(send)
    send.set_defaults(handler=agency_send)
    peek = groups.add_parser("peek", help="read a workflow's channel")
    peek.add_argument("target", nargs="?", default="@global", help="@name:tag (default @global)")
    peek.add_argument("--limit", type=int, default=50, help="the last N messages")
    _common(peek)
    peek.set_defaults(handler=agency_peek)

    schedules = groups.add_parser("schedules", help="cron schedules")
    schedule_verbs = schedules.add_subparsers(dest="verb", required=True, metavar="VERB")
    schedules_ls = schedule_verbs.add_parser("ls", help="the agency's schedules")
    _common(schedules_ls)
    schedules_ls.set_defaults(handler=schedules_list)


def _register_replay(verbs: Any) -> None:
    replay = verbs.add_parser(
        "replay", help="print a workflow's history from the log (members' threads included)"
    )
    replay.add_argument("target", help="@name:tag, @name, or a workflow id (wf_…)")
    replay.add_argument(
        "--tenant", default=None, help="tenant id (default: tenant_id in endpoints.json)"
    )
    add_replay_options(
        replay,
        deltas="also show members' streamed model.delta events",
        re_execute="decide the controller's steps again and re-execute every member's thread "
        "with the current code (no model or tool is called, nothing is written); exit status "
        "1 if anything diverges",
    )
    add_app(replay)
    _common(replay)
    replay.set_defaults(handler=workflow_replay)


async def workflow_replay(args: argparse.Namespace) -> int:
    from agency.services.workflows.cli import replay_cmd

    return await replay_cmd.workflow_replay(args)


def _common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--agency", default=None, help=f"agency id (default: the one named {DEFAULT_AGENCY!r})"
    )
    add_data_dir(parser)


def _client(args: argparse.Namespace) -> httpx.AsyncClient:
    import httpx

    endpoints = running_endpoints(args)
    if not endpoints.api_url or not endpoints.api_key:
        raise WorkflowCliError("the running system has no API; start it with `agency up`")
    headers = {"Authorization": f"Bearer {endpoints.api_key}"}
    return httpx.AsyncClient(base_url=endpoints.api_url, headers=headers, timeout=60)


def _ok(response: httpx.Response) -> Any:
    if response.status_code >= 400:
        request = response.request
        raise WorkflowCliError(f"{request.method} {request.url.path}: {error_message(response)}")
    return response.json()


async def _agency(client: httpx.AsyncClient, args: argparse.Namespace) -> str:
    if args.agency:
        return str(args.agency)
    agencies = _ok(await client.get("/agencies"))
    named = [a for a in agencies if a["name"] == DEFAULT_AGENCY]
    if named:
        return str(named[0]["id"])
    created = _ok(await client.post("/agencies", json={"name": DEFAULT_AGENCY}))
    return str(created["id"])


def _ref(target: str) -> str:
    return target.strip().removeprefix("@")


def _inputs(pairs: list[str]) -> dict[str, str]:
    inputs: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise WorkflowCliError(f"--input {pair!r}: use KEY=VALUE")
        inputs[key] = value
    return inputs


async def _events(
    client: httpx.AsyncClient, body: dict[str, Any]
) -> AsyncIterator[tuple[str, Any]]:
    import httpx

    timeout = httpx.Timeout(10.0, read=None)
    async with client.stream("POST", "/run", json=body, timeout=timeout) as response:
        if response.status_code >= 400:
            await response.aread()
            _ok(response)
        event = ""
        async for line in response.aiter_lines():
            if line.startswith("event:"):
                event = line.removeprefix("event:").strip()
            elif line.startswith("data:"):
                yield event, json.loads(line.removeprefix("data:").strip())


def print_message(message: dict[str, Any]) -> None:
    who = message["sender"]
    print(f"[@{who}] {message['content']}", flush=True)


async def workflow_run(args: argparse.Namespace) -> int:
    from agency.services.workflows.definition import variables_in

    try:
        text = args.file.read_text()
    except OSError as e:
        raise WorkflowCliError(f"cannot read {args.file}: {e.strerror}") from e
    files = _prompt_files(args.file, text)
    # Only the variables the files name are sent, never the whole environment.
    named = variables_in("\n".join([text, *files.values()]))
    env = {n: os.environ[n] for scope, n in named if scope == "env" and n in os.environ}
    async with _client(args) as client:
        agency = await _agency(client, args)
        created = _ok(
            await client.post(
                f"/agency/{agency}/workflows",
                json={"definition": text, "name": args.file.stem.replace(".", "-"),
                      "tag": args.tag, "inputs": _inputs(args.input), "env": env,
                      "files": files},
            )
        )  # fmt: skip
        target = f"@{created['name']}" + (f":{created['tag']}" if created["tag"] else "")
        print(f"{target}: {', '.join('@' + m for m in created['members'])}", flush=True)
        message = args.message or created["kickoff"]
        if not message:
            print("no kickoff and no --message: nothing to run", flush=True)
            return 0
        body = {
            "workflow": created["name"], "tag": created["tag"], "message": message,
            "agency": agency, "timeoutSeconds": args.timeout,
        }  # fmt: skip
        async for event, data in _events(client, body):
            if event == "message":
                print_message(data)
            elif event == "tool_call":
                args_text = json.dumps(data["args"], ensure_ascii=False)[:80]
                print(f"    ⚙ @{data['agent']} {data['tool']}({args_text})", flush=True)
            elif event == "done":
                print(f"— {data['status']}", flush=True)
                return 0 if data["status"] == "settled" else 1
    return 1


def _prompt_files(definition: Path, text: str) -> dict[str, str]:
    """The content of each `system_prompt_file`, read relative to the definition's folder."""
    from agency.services.workflows.definition import prompt_files

    files: dict[str, str] = {}
    for path in prompt_files(text):
        where = definition.parent / Path(path).expanduser()
        try:
            files[path] = where.read_text(encoding="utf-8")
        except OSError as e:
            raise WorkflowCliError(
                f"{definition}: system_prompt_file {path!r}: cannot read {where}: {e.strerror or e}"
            ) from e
        except UnicodeDecodeError as e:
            raise WorkflowCliError(
                f"{definition}: system_prompt_file {path!r}: {where} is not UTF-8 text"
            ) from e
    return files


async def workflow_ls(args: argparse.Namespace) -> int:
    async with _client(args) as client:
        agency = await _agency(client, args)
        rows = _ok(await client.get(f"/agency/{agency}/workflows"))
    for w in rows:
        target = f"@{w['name']}" + (f":{w['tag']}" if w["tag"] else "")
        members = " ".join(f"@{m['name']}({m['status']})" for m in w["members"])
        print(f"{target:<32} {w['status']:<8} {w['messageCount']:>4} msgs  {members}")
    return 0


async def workflow_stop(args: argparse.Namespace) -> int:
    async with _client(args) as client:
        agency = await _agency(client, args)
        _ok(await client.post(f"/agency/{agency}/workflows/{_ref(args.target)}/stop", json={}))
    print(f"stopping {args.target}")
    return 0


async def agency_send(args: argparse.Namespace) -> int:
    words: list[str] = list(args.words)
    to: list[str] = []
    while len(words) > 1 and words[0].startswith("@"):
        to.append(words.pop(0).removeprefix("@"))
    message = " ".join(words)
    async with _client(args) as client:
        agency = await _agency(client, args)
        path = f"/agency/{agency}/workflows/{_ref(args.target)}/messages"
        posted = _ok(await client.post(path, json={"content": message, "to": to}))
    print(f"sent {posted['messageId']} to {args.target}")
    return 0


async def agency_peek(args: argparse.Namespace) -> int:
    async with _client(args) as client:
        agency = await _agency(client, args)
        path = f"/agency/{agency}/workflows/{_ref(args.target)}/channel"
        messages: list[dict[str, Any]] = []
        after = 0
        while True:
            page = _ok(await client.get(path, params={"afterSeq": after, "limit": 500}))
            messages += page["messages"]
            if not page["hasMore"] or not page["messages"]:
                break
            after = page["messages"][-1]["seq"]
    for message in messages[-args.limit :]:
        print_message(message)
    if not messages:
        print(f"{args.target}: no messages yet")
    return 0


async def schedules_list(args: argparse.Namespace) -> int:
    async with _client(args) as client:
        agency = await _agency(client, args)
        rows = _ok(await client.get(f"/agency/{agency}/schedules"))
    for s in rows:
        target = f"@{s['agent']}" if s["agent"] else s["workflowId"]
        state = "active" if s["active"] else "removed"
        last = s["lastTick"] or "never"
        fired = f"fired {s['fired']:>3}  last {last}"
        print(f"{s['name']:<24} {s['cron']:<16} {state:<8} {fired}  {target}")
    return 0
