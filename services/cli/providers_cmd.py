"""`agency providers …`: a tenant's own model provider keys, through the admin routes.
A key is never an argument (it would show in the process list and the shell's history):
it is read from standard input or from the environment variable `--key-env` names."""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from agency.services.cli.arguments import add_data_dir, command_group
from agency.services.cli.tenants_cmd import admin_command


def register(groups: Any) -> None:
    sub = command_group(
        groups, "providers", "tenants' own model provider keys (admin; docs/models.md)"
    )
    ls = sub.add_parser("ls", help="a tenant's own providers: whether key and URL are set")
    ls.add_argument("tenant")
    ls.set_defaults(handler=providers_ls)
    put = sub.add_parser("set", help="set a tenant's key (from stdin or --key-env) of a provider")
    put.add_argument("tenant")
    put.add_argument("name", help="the provider, e.g. openai")
    put.add_argument("--key-env", default=None, help="read the key from this variable")
    put.add_argument("--no-key", action="store_true", help="set only --base-url")
    put.add_argument("--base-url", default="", help="the tenant's own endpoint (https)")
    put.set_defaults(handler=providers_set)
    rm = sub.add_parser("rm", help="remove a tenant's own settings of a provider")
    rm.add_argument("tenant")
    rm.add_argument("name")
    rm.set_defaults(handler=providers_rm)
    policy = sub.add_parser(
        "policy", help="whether the operator's provider settings serve a tenant's runs"
    )
    policy.add_argument("tenant")
    policy.add_argument("--operator-fallback", choices=("on", "off"), required=True)
    policy.set_defaults(handler=providers_policy)
    for parser in (ls, put, rm, policy):
        add_data_dir(parser)


def _shown(body: dict[str, Any]) -> str:
    fallback = "on" if body.get("operatorFallback") else "off"
    lines = [f"operator fallback: {fallback}"]
    for p in body.get("providers", []):
        key = "key set" if p["hasKey"] else "no key"
        url = ", own base URL" if p["baseUrlSet"] else ""
        lines.append(f"{p['name']:<12} {key}{url}")
    return "\n".join(lines)


async def providers_ls(args: argparse.Namespace) -> int:
    return await admin_command(args, "GET", f"/tenants/{args.tenant}/providers", _shown)


def _key(args: argparse.Namespace) -> str | None:
    if args.no_key:
        return ""
    if args.key_env:
        key = os.environ.get(args.key_env, "")
        if not key:
            print(f"agency: the variable {args.key_env} is empty or not set", file=sys.stderr)
            return None
        return key
    if sys.stdin.isatty():
        print(f"{args.name} key for {args.tenant} (then Enter): ", end="", file=sys.stderr)
    key = sys.stdin.readline().strip()
    if not key:
        print("agency: no key on standard input", file=sys.stderr)
        return None
    return key


async def providers_set(args: argparse.Namespace) -> int:
    key = _key(args)
    if key is None:
        return 2
    body = {"apiKey": key, "baseUrl": args.base_url}
    path = f"/tenants/{args.tenant}/providers/{args.name}"

    def stored(said: Any) -> str:
        url = " and base URL" if said.get("baseUrlSet") else ""
        return f"{args.name}: the tenant's own key{url} stored sealed; its runs use them"

    return await admin_command(args, "PUT", path, stored, body)


async def providers_rm(args: argparse.Namespace) -> int:
    path = f"/tenants/{args.tenant}/providers/{args.name}"
    return await admin_command(
        args, "DELETE", path, lambda _: f"{args.name}: the tenant's own settings removed"
    )


async def providers_policy(args: argparse.Namespace) -> int:
    body = {"operatorFallback": args.operator_fallback == "on"}
    return await admin_command(args, "PUT", f"/tenants/{args.tenant}/model-policy", _shown, body)
