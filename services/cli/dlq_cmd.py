"""`agency dlq ls|show|replay|drop`: look into the dead-letter stream and re-drive it."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from agency.services.cli.arguments import add_data_dir, command_group, running_endpoints

if TYPE_CHECKING:
    from nats.js import JetStreamContext

    from agency.infra.jetstream.connection import Bus
    from agency.infra.jetstream.dlq_admin import LetterInfo


def register(groups: Any) -> None:
    sub = command_group(groups, "dlq", "the dead-letter stream: inspect, replay, drop")
    ls = sub.add_parser("ls", help="dead letters, oldest first")
    ls.add_argument("--from-seq", type=int, default=1)
    ls.add_argument("--limit", type=int, default=50)
    ls.add_argument("--tenant", default=None)
    ls.add_argument("--reason", default=None)
    ls.add_argument("--json", action="store_true")
    ls.set_defaults(handler=dlq_ls)
    show = sub.add_parser("show", help="one letter, with its message")
    show.add_argument("seq", type=int)
    show.set_defaults(handler=dlq_show)
    replay = sub.add_parser("replay", help="send a dead-lettered command again, drop the letter")
    replay.add_argument("seq", type=int, nargs="+")
    replay.set_defaults(handler=dlq_replay)
    drop = sub.add_parser("drop", help="remove letters for good")
    drop.add_argument("seq", type=int, nargs="+")
    drop.set_defaults(handler=dlq_drop)
    for parser in (ls, show, replay, drop):
        add_data_dir(parser)


def _bus(args: argparse.Namespace) -> Bus:

    from agency.infra.jetstream.connection import Bus

    return Bus(running_endpoints(args).nats_url, name="agency-dlq")


def _summary(letter: LetterInfo) -> dict[str, Any]:
    return {
        "seq": letter.seq,
        "time": letter.time.isoformat() if letter.time else None,
        "reason": letter.reason,
        "detail": letter.detail,
        "sourceStream": letter.source_stream,
        "sourceSubject": letter.source_subject,
        "sourceSeq": letter.source_seq,
        "consumer": letter.consumer,
        "deliveries": letter.deliveries,
        "tenantId": letter.tenant_id,
        "size": letter.size,
        "replayable": letter.replayable,
    }


async def dlq_ls(args: argparse.Namespace) -> int:
    from agency.infra.jetstream import dlq_admin

    async with _bus(args) as bus:
        letters = await dlq_admin.list_letters(
            bus.js, from_seq=args.from_seq, limit=args.limit, tenant=args.tenant,
            reason=args.reason,
        )  # fmt: skip
    if args.json:
        print(json.dumps([_summary(letter) for letter in letters], indent=2))
        return 0
    if not letters:
        print("no dead letters")
    for letter in letters:
        when = letter.time.isoformat(timespec="seconds") if letter.time else "-"
        print(
            f"{letter.seq:>6}  {when}  {letter.reason:<24} {letter.source_subject}  "
            f"{letter.detail[:80]}"
        )
    return 0


async def dlq_show(args: argparse.Namespace) -> int:
    from agency.infra.jetstream import dlq_admin

    async with _bus(args) as bus:
        try:
            letter = await dlq_admin.get_letter(bus.js, args.seq)
        except dlq_admin.DeadLetterError as e:
            print(f"agency: {e}", file=sys.stderr)
            return 1
    document = _summary(letter)
    try:
        document["data"] = json.loads(letter.data)
    except ValueError:
        document["data"] = letter.data.decode(errors="replace")
    print(json.dumps(document, indent=2))
    return 0


async def dlq_replay(args: argparse.Namespace) -> int:
    from agency.infra.jetstream import dlq_admin

    async def replay(js: JetStreamContext, seq: int) -> str:
        return f"replayed {seq} as command {await dlq_admin.replay(js, seq)}"

    return await _each_letter(args, replay)


async def dlq_drop(args: argparse.Namespace) -> int:
    from agency.infra.jetstream import dlq_admin

    async def drop(js: JetStreamContext, seq: int) -> str:
        await dlq_admin.drop(js, seq)
        return f"dropped {seq}"

    return await _each_letter(args, drop)


async def _each_letter(
    args: argparse.Namespace, act: Callable[[JetStreamContext, int], Awaitable[str]]
) -> int:
    """`act` on each dead letter `args.seq` names, saying what it did; 1 if any failed."""
    from agency.infra.jetstream import dlq_admin

    failed = 0
    async with _bus(args) as bus:
        for seq in args.seq:
            try:
                print(await act(bus.js, seq))
            except dlq_admin.DeadLetterError as e:
                print(f"agency: {e}", file=sys.stderr)
                failed += 1
    return 1 if failed else 0
