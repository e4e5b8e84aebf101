"""`agency export thread|agency|tenant`, `agency import` and `agency backup create|restore`.

Export and import read and write the log over NATS with the data directory's credentials
(the operator's): an export is a tar.gz of the events as JSON Lines, the files and a
manifest (`services/archive/`); an import writes one into a tenant of this deployment. A
backup is a snapshot of every stream (`infra/jetstream/snapshots.py`), restored into a
fresh data directory's NATS before the services start there.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from pathlib import Path
from typing import Any

from agency.services.cli.arguments import add_data_dir, command_group, running_endpoints


def register(groups: Any) -> None:
    export = command_group(groups, "export", "write a thread, an agency or a tenant to an archive")
    for kind, what in (
        ("thread", "a root thread with every subagent below it and its agency's blueprints"),
        ("agency", "an agency and every thread in it"),
        ("tenant", "every event of a tenant: keys, budgets, agencies, threads, workflows"),
    ):
        parser = export.add_parser(kind, help=what)
        parser.add_argument("id", help=f"the {kind}'s id")
        if kind != "tenant":
            parser.add_argument(
                "--tenant",
                default=None,
                help=f"the tenant whose {kind} it is (default: tenant_id in endpoints.json)",
            )
        parser.add_argument(
            "--out",
            "-o",
            default=None,
            help="the archive to write (default: agency-KIND-ID.tar.gz)",
        )
        add_data_dir(parser)
        parser.set_defaults(handler=export_command, kind=kind)

    users = command_group(groups, "users", "the end users threads are created for")
    user_export = users.add_parser(
        "export", help="an archive of the end user's threads (with their subagents)"
    )
    user_export.add_argument(
        "id", help="the end user's id, as given when their threads were created"
    )
    user_export.add_argument(
        "--tenant",
        default=None,
        help="the tenant whose end user it is (default: tenant_id in endpoints.json)",
    )
    user_export.add_argument(
        "--out", "-o", default=None, help="where to write it (default: agency-user-ID.tar.gz)"
    )
    add_data_dir(user_export)
    user_export.set_defaults(handler=export_command, kind="user")
    user_forget = users.add_parser(
        "forget",
        help="erase every thread of the end user across the tenant's agencies (docs/data.md)",
    )
    user_forget.add_argument(
        "id", help="the end user's id, as given when their threads were created"
    )
    user_forget.add_argument("--json", action="store_true", help="print the answer as JSON")
    add_data_dir(user_forget)
    user_forget.set_defaults(handler=users_forget)

    load = groups.add_parser("import", help="write an archive into this deployment")
    load.add_argument("archive", help="a .tar.gz written by `agency export` or an export route")
    load.add_argument(
        "--tenant",
        default=None,
        help="the tenant to import a thread's or an agency's archive into (a tenant's "
        "archive keeps its own)",
    )
    load.add_argument("--json", action="store_true", help="print the result as JSON")
    add_data_dir(load)
    load.set_defaults(handler=import_command)

    backup = command_group(groups, "backup", "snapshots of every NATS stream, and their restore")
    create = backup.add_parser("create", help="snapshot every stream into a new directory")
    create.add_argument("dir", help="the backup directory to create (must not exist)")
    add_data_dir(create)
    create.set_defaults(handler=backup_create)
    restore = backup.add_parser(
        "restore", help="restore a backup into this data directory's NATS (streams empty)"
    )
    restore.add_argument("dir", help="a directory written by `agency backup create`")
    add_data_dir(restore)
    restore.set_defaults(handler=backup_restore)


async def users_forget(args: argparse.Namespace) -> int:
    from agency.services.cli.threads_client_cmd import users_forget as forget

    return await forget(args)


def _fail(problem: object) -> int:
    print(f"agency: {problem}", file=sys.stderr)
    return 2


async def export_command(args: argparse.Namespace) -> int:
    from agency.contracts.errors import ContractError
    from agency.infra.jetstream.connection import Bus
    from agency.services.archive.errors import ArchiveError
    from agency.services.archive.export import (
        export_agency,
        export_end_user,
        export_tenant,
        export_thread,
    )
    from agency.services.threads.reads import ThreadNotFound

    endpoints = running_endpoints(args)
    tenant: str = args.id if args.kind == "tenant" else (args.tenant or endpoints.tenant_id or "")
    if not tenant:
        return _fail("no tenant: pass --tenant (endpoints.json names none)")
    try:
        async with Bus(endpoints.nats_url, name="agency-export") as bus:
            if args.kind == "thread":
                exported = await export_thread(bus, tenant, args.id)
            elif args.kind == "agency":
                exported = await export_agency(bus, tenant, args.id)
            elif args.kind == "user":
                exported = await export_end_user(bus, tenant, args.id)
            else:
                exported = await export_tenant(bus, tenant)
    except (ArchiveError, ThreadNotFound, ContractError) as e:
        return _fail(e)
    out = Path(args.out or f"agency-{args.kind}-{args.id}.tar.gz")
    await asyncio.to_thread(out.write_bytes, exported.data)
    manifest = exported.manifest
    print(
        f"exported {args.kind} {args.id}: {manifest.events} events of "
        f"{len(manifest.aggregates)} aggregates, {len(manifest.files)} files → {out}"
    )
    return 0


async def import_command(args: argparse.Namespace) -> int:
    from agency.infra.jetstream.connection import Bus
    from agency.services.archive.errors import ArchiveError

    endpoints = running_endpoints(args)
    try:
        data = await asyncio.to_thread(Path(args.archive).read_bytes)
    except OSError as e:
        return _fail(f"cannot read {args.archive}: {e.strerror}")
    try:
        async with Bus(endpoints.nats_url, name="agency-import") as bus:
            from agency.services.archive.load import import_archive

            done = await import_archive(bus, data, tenant_id=args.tenant, operator=True)
    except ArchiveError as e:
        return _fail(e)
    if args.json:
        import msgspec

        print(json.dumps(msgspec.to_builtins(done.answer())))
    else:
        print(
            f"imported {done.kind} {done.root} into tenant {done.tenant_id}: "
            f"{done.events} events, {len(done.threads)} threads"
        )
        for old, new in done.remapped.items():
            print(f"  {old} → {new}")
        for kept in done.kept:
            print(f"  {kept} was there already: kept")
    return 0


async def backup_create(args: argparse.Namespace) -> int:
    from agency.infra.jetstream.connection import Bus
    from agency.infra.jetstream.snapshots import SnapshotError, snapshot_stream, stored_streams

    target = Path(args.dir)
    if await asyncio.to_thread(target.exists):
        return _fail(f"{target} exists: name a new directory")
    endpoints = running_endpoints(args)
    try:
        async with Bus(endpoints.nats_url, name="agency-backup") as bus:
            for stream in await stored_streams(bus.nc):
                copy = await snapshot_stream(bus.nc, stream, target / stream)
                print(f"{stream}: {copy.messages} messages, {copy.bytes} bytes")
    except SnapshotError as e:
        return _fail(e)
    print(f"backup written to {target}")
    return 0


async def backup_restore(args: argparse.Namespace) -> int:
    from agency.infra.jetstream.connection import Bus
    from agency.infra.jetstream.snapshots import META, SnapshotError, restore_stream

    source = Path(args.dir)
    streams = await asyncio.to_thread(_snapshots_in, source)
    if not streams:
        return _fail(f"{source} holds no stream snapshot (a directory per stream with {META})")
    endpoints = running_endpoints(args)
    try:
        async with Bus(endpoints.nats_url, name="agency-restore") as bus:
            for directory in streams:
                copy = await restore_stream(bus.nc, directory)
                print(f"{copy.stream}: {copy.messages} messages restored")
    except SnapshotError as e:
        return _fail(e)
    print("restored; start the services: the read models rebuild from the log")
    return 0


def _snapshots_in(source: Path) -> list[Path]:
    from agency.infra.jetstream.snapshots import META

    if not source.is_dir():
        return []
    return sorted(p for p in source.iterdir() if (p / META).is_file())
