"""`agency keys rotate`: rotate the operator key, or a tenant's key (docs/data.md).

The operator key: each tenant key in the key store is rewrapped under the current operator
key, from the previous one. With `AGENCY_OPERATOR_KEY` set, the previous key is
`AGENCY_OPERATOR_KEY_PREVIOUS`, and every process holds both while this runs. On a data
directory's `operator-key`, the command makes the new key and keeps the old one beside it
(`operator-key.previous`) until `--finish`, once every process has restarted with both.

The key store is reached at `NATS_URL`, else at the running system's (`--data-dir`). A
tenant key (`--tenant`): through the admin route, which rewraps the tenant's data keys.
"""

from __future__ import annotations

import argparse
import getpass
import os
from pathlib import Path
from typing import Any

from agency.services.cli.arguments import add_data_dir, command_group, data_dir
from agency.services.cli.tenants_cmd import admin_command


def register(groups: Any) -> None:
    sub = command_group(groups, "keys", "the keys that seal thread data (operator, tenants)")
    rotate = sub.add_parser(
        "rotate",
        help="rotate the operator key (every tenant key rewrapped) or, with --tenant, a "
        "tenant's key (its data keys rewrapped); the log is not rewritten (docs/data.md)",
    )
    rotate.add_argument("--tenant", default=None, help="rotate this tenant's key instead")
    rotate.add_argument(
        "--finish",
        action="store_true",
        help="after every process restarted with the new operator key: rewrap what is left "
        "and drop the previous key (the data directory's operator-key.previous)",
    )
    add_data_dir(rotate)
    rotate.set_defaults(handler=keys_rotate)


class RotationRefused(Exception):
    """The operator key cannot be rotated as asked; the message says what to do."""


async def keys_rotate(args: argparse.Namespace) -> int:
    if args.tenant is not None:
        path = f"/tenants/{args.tenant}/encryption-key/rotate"
        return await admin_command(args, "POST", path, _tenant_said)
    return await _rotate_operator(args)


def _tenant_said(body: Any) -> str:
    again = " (finished a rotation stopped earlier)" if body["resumed"] else ""
    return (
        f"tenant {body['tenantId']}: key version {body['keyVersion']}, "
        f"{body['rewrapped']} data keys rewrapped{again}"
    )


async def _rotate_operator(args: argparse.Namespace) -> int:
    from agency.infra.endpoints import read_endpoints
    from agency.infra.keystore.operator import (
        OPERATOR_KEY_FILE,
        OPERATOR_KEY_VARIABLE,
        PREVIOUS_KEY_FILE,
        PREVIOUS_KEY_VARIABLE,
    )

    directory = data_dir(args)
    # A deployment's processes find NATS by `NATS_URL`; `agency up`'s, in its endpoints.
    nats_url = os.environ.get("NATS_URL") or read_endpoints(directory).nats_url
    from_env = bool(os.environ.get(OPERATOR_KEY_VARIABLE))
    previous_file = directory / PREVIOUS_KEY_FILE
    if from_env:
        if not args.finish and not os.environ.get(PREVIOUS_KEY_VARIABLE):
            raise RotationRefused(
                f"{PREVIOUS_KEY_VARIABLE} is not set: set {OPERATOR_KEY_VARIABLE} to the new "
                f"key and {PREVIOUS_KEY_VARIABLE} to the old one on every process, restart "
                "them, then run this with both (docs/data.md)"
            )
    elif args.finish:
        if not previous_file.exists():
            raise RotationRefused(f"no rotation under way: {previous_file} does not exist")
        _use_keys(directory / OPERATOR_KEY_FILE, previous_file)
    else:
        if previous_file.exists():
            raise RotationRefused(
                f"a rotation is under way ({previous_file} exists): restart the services, "
                "then run `agency keys rotate --finish`"
            )
        _new_key(directory / OPERATOR_KEY_FILE, previous_file)
        _use_keys(directory / OPERATOR_KEY_FILE, previous_file)
    rotation = await _rewrap_all(nats_url)
    print(
        f"operator key {rotation.key_id}: {rotation.rewrapped} tenant keys rewrapped, "
        f"{rotation.unchanged} already under it"
    )
    if from_env:
        print(f"now remove {PREVIOUS_KEY_VARIABLE} from every process and restart them")
    elif args.finish:
        previous_file.unlink()
        print(f"removed {previous_file}")
    else:
        print(
            "now restart the services (they take both keys from the data directory), then "
            "run `agency keys rotate --finish`"
        )
    return 0


def _new_key(current: Path, previous: Path) -> None:
    """The old key kept as `previous` (written first: nothing is lost if stopped here),
    then a new key in `current`; both readable by their owner only."""
    import secrets

    if not current.exists():
        raise RotationRefused(f"{current} does not exist: no operator key to rotate")
    _write(previous, current.read_text().strip())
    _write(current, secrets.token_urlsafe(32))


def _write(path: Path, secret: str) -> None:
    aside = path.with_name(f".{path.name}.{os.getpid()}")
    fd = os.open(aside, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(secret + "\n")
        f.flush()
        os.fsync(f.fileno())
    aside.replace(path)


def _use_keys(current: Path, previous: Path) -> None:
    from agency.infra.keystore.operator import OPERATOR_KEY_VARIABLE, PREVIOUS_KEY_VARIABLE

    os.environ[OPERATOR_KEY_VARIABLE] = current.read_text().strip()
    os.environ[PREVIOUS_KEY_VARIABLE] = previous.read_text().strip()


async def _rewrap_all(nats_url: str) -> Any:
    from agency.infra.jetstream.natsclient import connect
    from agency.infra.keystore.operator import operator_keys
    from agency.infra.keystore.rotation import rotate_operator
    from agency.infra.keystore.vault import KeyVault

    servers = [u.strip() for u in nats_url.split(",") if u.strip()]
    nc = await connect(servers, name="agency-keys-rotate", connect_timeout=10)
    try:
        vault = await KeyVault(nc.jetstream(timeout=10), operator_keys()).open()
        return await rotate_operator(vault, f"cli:{getpass.getuser()}")
    finally:
        await nc.close()
