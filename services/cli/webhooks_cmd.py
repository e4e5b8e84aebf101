"""`agency webhooks add|ls|rm|deliveries`: an agency's webhook subscriptions and their
deliveries, over the HTTP API with the running system's key (docs/protocols.md)."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from typing import Any

from agency.services.cli.agencies import DEFAULT_AGENCY, ensure_default_agency
from agency.services.cli.arguments import add_data_dir, command_group, running_endpoints

KINDS = ("run.ended", "approval.needed", "subagent.reported", "workflow.proposal")


def register(groups: Any) -> None:
    sub = command_group(groups, "webhooks", "an agency's webhook subscriptions (docs/protocols.md)")
    add = sub.add_parser("add", help="subscribe a URL to event kinds (prints its secret, once)")
    add.add_argument("url", help="where deliveries are POSTed (http or https)")
    add.add_argument(
        "--events", default="run.ended",
        help=f"comma-separated kinds, of: {', '.join(KINDS)} (default: run.ended)",
    )  # fmt: skip
    add.add_argument("--description", default="", help="what the subscription is for")
    add.set_defaults(handler=webhooks_add)
    ls = sub.add_parser("ls", help="the agency's subscriptions")
    ls.set_defaults(handler=webhooks_ls)
    rm = sub.add_parser("rm", help="remove a subscription")
    rm.add_argument("webhook", help="the subscription's id")
    rm.set_defaults(handler=webhooks_rm)
    deliveries = sub.add_parser(
        "deliveries", help="a subscription's deliveries: status, attempts, last error"
    )
    deliveries.add_argument("webhook", help="the subscription's id")
    deliveries.add_argument("--limit", type=int, default=50, help="how many, newest first")
    deliveries.set_defaults(handler=webhooks_deliveries)
    for command in (add, ls, rm, deliveries):
        command.add_argument(
            "--agency", default=None, help=f"agency id (default: {DEFAULT_AGENCY!r})"
        )
        command.add_argument("--json", action="store_true", help="print answers as JSON")
        add_data_dir(command)


class _Failed(Exception):
    pass


async def _request(
    args: argparse.Namespace, method: str, tail: str, body: Any = None, params: Any = None
) -> Any:
    """One request on the agency's webhooks (`tail` after `/webhooks`); its JSON answer."""
    import httpx

    from agency.services.client import AsyncAgencyClient

    endpoints = running_endpoints(args)
    if not endpoints.api_url or not endpoints.api_key:
        raise _Failed("the running system has no API; start it with `agency up`")
    agency = args.agency
    if agency is None:
        async with AsyncAgencyClient(endpoints.api_url, endpoints.api_key) as client:
            agency = await ensure_default_agency(client)
    headers = {"Authorization": f"Bearer {endpoints.api_key}"}
    async with httpx.AsyncClient(base_url=endpoints.api_url, headers=headers, timeout=30) as http:
        try:
            response = await http.request(
                method, f"/agency/{agency}/webhooks{tail}", json=body, params=params
            )
        except httpx.HTTPError as e:
            raise _Failed(f"the API at {endpoints.api_url} did not answer: {e}") from e
    if response.status_code >= 400:
        try:
            said = response.json().get("error", response.text)
        except ValueError:
            said = response.text
        raise _Failed(f"{said} (HTTP {response.status_code})")
    return response.json() if response.content else {}


async def _run(args: argparse.Namespace, method: str, tail: str, **kw: Any) -> Any:
    try:
        return await _request(args, method, tail, **kw)
    except _Failed as e:
        print(f"agency: {e}", file=sys.stderr)
        return None


async def webhooks_add(args: argparse.Namespace) -> int:
    events = [e.strip() for e in args.events.split(",") if e.strip()]
    body = {"url": args.url, "events": events, "description": args.description}
    created = await _run(args, "POST", "", body=body)
    if created is None:
        return 1
    if args.json:
        print(json.dumps(created, indent=2))
    else:
        print(f"webhook {created['id']}: {created['url']} ({', '.join(created['events'])})")
        print(f"secret (shown once): {created['secret']}")
    return 0


async def webhooks_ls(args: argparse.Namespace) -> int:
    return await _listing(args, "", "webhooks", _webhook_line)


def _webhook_line(w: dict[str, Any]) -> str:
    return f"{w['id']}  {w['url']}  {','.join(w['events'])}  {w['description']}".rstrip()


async def webhooks_rm(args: argparse.Namespace) -> int:
    if await _run(args, "DELETE", f"/{args.webhook}") is None:
        return 1
    print(f"webhook {args.webhook} removed")
    return 0


async def webhooks_deliveries(args: argparse.Namespace) -> int:
    tail = f"/{args.webhook}/deliveries"
    return await _listing(args, tail, "deliveries", _delivery_line, params={"limit": args.limit})


def _delivery_line(d: dict[str, Any]) -> str:
    line = f"{d['id']}  {d['event']:<18} {d['status']:<9} attempts={d['attempts']}"
    if d["status"] == "pending" and d["nextAttemptAt"]:
        line += f"  next={d['nextAttemptAt']}"
    if d["lastError"]:
        line += f"  last error: {d['lastError']}"
    return line


async def _listing(
    args: argparse.Namespace,
    tail: str,
    key: str,
    line_of: Callable[[dict[str, Any]], str],
    params: dict[str, Any] | None = None,
) -> int:
    """GET a list (under `key` of the answer): as JSON with `--json`, else a line each."""
    found = await _run(args, "GET", tail, params=params)
    if found is None:
        return 1
    if args.json:
        print(json.dumps(found[key], indent=2))
        return 0
    for item in found[key]:
        print(line_of(item))
    return 0
