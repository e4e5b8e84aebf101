"""`agency tenants …`: create tenants and manage their API keys, through the admin routes."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from agency.services.cli.arguments import (
    add_data_dir,
    command_group,
    error_message,
    running_endpoints,
)

if TYPE_CHECKING:
    import httpx

    from agency.infra.endpoints import Endpoints


def register(groups: Any) -> None:
    sub = command_group(groups, "tenants", "tenants and their API keys (admin)")
    create = sub.add_parser("create", help="create a tenant; prints its id and first key")
    create.add_argument("name")
    create.set_defaults(handler=tenants_create)

    creds = _on_tenant(
        sub,
        "credentials",
        tenants_credentials,
        "NATS credentials for a tenant's own services (shown once)",
    )
    budget = _on_tenant(
        sub,
        "budget",
        tenants_budget,
        "a tenant's spend budget per period and what it spent; with --tokens or --usd, "
        "set it (0: none; the one not given goes back to the default; docs/operations.md)",
    )
    budget.add_argument("--tokens", type=int, default=None, help="tokens a period")
    budget.add_argument("--usd", type=float, default=None, help="USD a period")
    gone = _on_tenant(
        sub,
        "delete",
        tenants_delete,
        "delete the tenant: every agency with its threads, its API keys revoked, its "
        "key destroyed (docs/data.md)",
    )
    erase = _on_tenant(
        sub,
        "delete-agencies",
        tenants_delete_agencies,
        "erase every agency of the tenant with its threads (the tenant, its keys and "
        "settings stay; docs/data.md)",
    )
    retention = _on_tenant(
        sub,
        "retention",
        tenants_retention,
        "how long a tenant's threads are kept after their last activity; with --days or "
        "--seconds, set it (0: no limit of its own), with --default go back to the "
        "operator's (docs/data.md)",
    )
    given = retention.add_mutually_exclusive_group()
    given.add_argument("--days", type=float, default=None, help="days (fractions allowed)")
    given.add_argument("--seconds", type=float, default=None, help="seconds")
    given.add_argument("--default", action="store_true", help="the operator's default")

    keys = sub.add_parser("keys", help="a tenant's API keys")
    keys_sub = keys.add_subparsers(dest="keys_command", required=True, metavar="COMMAND")
    ls = _on_tenant(keys_sub, "ls", keys_ls, "list keys: id, name, issued, last used, revoked")
    ls.add_argument("--json", action="store_true")
    new = _on_tenant(keys_sub, "create", keys_create, "a new key (shown once)")
    new.add_argument("--name", default="")
    revoke = _on_tenant(keys_sub, "revoke", keys_revoke, "revoke a key: refused at once everywhere")
    revoke.add_argument("key_id")
    rotate = _on_tenant(
        keys_sub, "rotate", keys_rotate, "a new key replacing an old one (shown once)"
    )
    rotate.add_argument("key_id")
    # Last, so that `--help` lists each command's own arguments first.
    for parser in (create, creds, budget, gone, erase, retention, ls, new, revoke, rotate):
        add_data_dir(parser)


def _on_tenant(
    sub: Any, name: str, handler: Callable[[argparse.Namespace], Any], help_text: str
) -> argparse.ArgumentParser:
    """A subcommand whose first argument names the tenant it acts on."""
    parser: argparse.ArgumentParser = sub.add_parser(name, help=help_text)
    parser.add_argument("tenant")
    parser.set_defaults(handler=handler)
    return parser


class AdminError(Exception):
    pass


async def _admin(
    endpoints: Endpoints, method: str, path: str, body: dict[str, Any] | None = None
) -> httpx.Response:
    if not endpoints.api_url or not endpoints.admin_secret:
        raise AdminError("the running system has no API (start it with `agency up`)")
    import httpx

    headers = {"Authorization": f"Bearer {endpoints.admin_secret}"}
    async with httpx.AsyncClient(base_url=endpoints.api_url, timeout=30) as client:
        response = await client.request(method, path, json=body, headers=headers)
    if response.status_code >= 400:
        raise AdminError(f"{method} {path}: {response.status_code} {error_message(response)}")
    return response


async def admin_request(args: argparse.Namespace, method: str, path: str, body: Any = None) -> Any:
    try:
        response = await _admin(running_endpoints(args), method, path, body)
    except AdminError as e:
        print(f"agency: {e}", file=sys.stderr)
        return None
    return response.json() if response.content else {}


async def admin_command(
    args: argparse.Namespace, method: str, path: str, said: Callable[[Any], str], body: Any = None
) -> int:
    """One admin request, its answer printed as `said` words it: 0, or 1 when it failed."""
    answer = await admin_request(args, method, path, body)
    if answer is None:
        return 1
    print(said(answer))
    return 0


async def tenants_create(args: argparse.Namespace) -> int:
    return await admin_command(
        args, "POST", "/tenants", _issued("tenant", "tenantId"), {"name": args.name}
    )


async def tenants_credentials(args: argparse.Namespace) -> int:
    path = f"/tenants/{args.tenant}/nats-credentials"
    return await admin_command(args, "POST", path, lambda body: json.dumps(body, indent=2))


async def tenants_budget(args: argparse.Namespace) -> int:
    given = {"tokens": args.tokens, "usd": args.usd}
    body = await _read_or_set(args, f"/tenants/{args.tenant}/budget", given)
    if body is None:
        return 1
    tokens = body["tokenBudget"] or "no limit"
    usd = f"${body['usdBudget']:g}" if body["usdBudget"] else "no limit"
    print(
        f"per {body['period']}: {tokens} tokens, {usd}; spent {body['tokensSpent']} tokens, "
        f"${body['usdSpent']:.4f}; resets at {body['resetsAt']}"
    )
    return 0


async def _read_or_set(
    args: argparse.Namespace, path: str, given: dict[str, Any], *, reset: bool = False
) -> Any:
    """A tenant's setting at `path`: set to the values `given` (those not None), or back to
    the default with `reset` (a PUT of none), else read; None when the request failed."""
    asked = {k: v for k, v in given.items() if v is not None}
    if not asked and not reset:
        return await admin_request(args, "GET", path)
    return await admin_request(args, "PUT", path, asked)


async def tenants_delete_agencies(args: argparse.Namespace) -> int:
    def said(deletions: list[dict[str, Any]]) -> str:
        lines = [f"{d['agencyId']}  {len(d['threads'])} thread(s)" for d in deletions]
        return "\n".join([*lines, f"deleted {len(deletions)} agenc(ies) of {args.tenant}"])

    return await admin_command(args, "DELETE", f"/tenants/{args.tenant}/agencies", said)


async def tenants_delete(args: argparse.Namespace) -> int:
    def said(deleted: dict[str, Any]) -> str:
        return (
            f"deleted tenant {deleted['tenantId']} at {deleted['deletedAt']}: "
            f"{len(deleted['agencies'])} agenc(ies), "
            f"{len(deleted['apiKeysRevoked'])} API key(s) revoked"
        )

    return await admin_command(args, "DELETE", f"/tenants/{args.tenant}", said)


async def tenants_retention(args: argparse.Namespace) -> int:
    given = {"days": args.days, "seconds": args.seconds}
    path = f"/tenants/{args.tenant}/retention"
    body = await _read_or_set(args, path, given, reset=args.default)
    if body is None:
        return 1
    own = body["retentionSeconds"]
    print(
        f"threads kept {_kept(body['effectiveSeconds'])} after their last activity "
        f"({'set: ' + _kept(own) if own is not None else 'the operator default'}; "
        f"operator default {_kept(body['operatorDefaultSeconds'])}, "
        f"maximum {_kept(body['operatorMaxSeconds'])})"
    )
    return 0


def _kept(seconds: float) -> str:
    if not seconds:
        return "without limit"
    if seconds % 86400 == 0:
        days = seconds / 86400
        return f"{days:g} day" if days == 1 else f"{days:g} days"
    return f"{seconds:g} s"


async def keys_ls(args: argparse.Namespace) -> int:
    keys = await admin_request(args, "GET", f"/tenants/{args.tenant}/keys")
    if keys is None:
        return 1
    if args.json:
        print(json.dumps(keys, indent=2))
        return 0
    print(f"{'key id':<28} {'name':<16} {'issued':<20} {'last used':<20} revoked")
    for k in keys:
        print(
            f"{k['keyId']:<28} {k['name'] or '-':<16} {_short(k['issuedAt']):<20} "
            f"{_short(k['lastUsedAt']):<20} {_short(k['revokedAt'])}"
        )
    return 0


async def keys_create(args: argparse.Namespace) -> int:
    path = f"/tenants/{args.tenant}/keys"
    return await admin_command(args, "POST", path, _issued("key id", "keyId"), {"name": args.name})


async def keys_rotate(args: argparse.Namespace) -> int:
    path = f"/tenants/{args.tenant}/keys/{args.key_id}/rotate"
    return await admin_command(args, "POST", path, _issued("key id", "keyId", replacing=True))


async def keys_revoke(args: argparse.Namespace) -> int:
    path = f"/tenants/{args.tenant}/keys/{args.key_id}"
    return await admin_command(args, "DELETE", path, lambda _: f"revoked {args.key_id}")


def _issued(label: str, field: str, *, replacing: bool = False) -> Callable[[Any], str]:
    """How an answer that issues an API key is shown: its id under `label`, the key once."""

    def said(body: Any) -> str:
        replaces = f" (replaces {body['replaces']}, now revoked)" if replacing else ""
        return f"{label:<8} {body[field]}{replaces}\napi key  {body['apiKey']}  (shown once)"

    return said


def _short(value: str | None) -> str:
    return value[:19].replace("T", " ") if value else "-"
