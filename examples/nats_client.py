"""Invoke an agent thread and follow its events over NATS, with only a tenant's credentials.

Everything here comes from the published contracts (`agency contracts schema --out schema`:
`asyncapi.json`, `commands/<type>.json`, `events/<type>.json`) and nats-py; nothing is
imported from Agency. Get credentials with `agency tenants credentials <tenant>`.

    python examples/nats_client.py --servers nats://127.0.0.1:4222 \\
        --user tenant_acme --password ... --inbox-prefix _INBOX_acme --tenant acme \\
        --agency <agency id> --thread <thread id> --message "Plan a trip" --schemas schema

What it does, as docs/nats.md explains:
1. creates a consumer on the events stream whose filter is the thread's own subject
   (`tenant.<t>.evt.thread.<id>`: every event of the thread, the type in the envelope and
   in the `Agency-Event-Type` header), pushing to an inbox under the tenant's private
   prefix, through the JetStream API prefix of the tenant's account (`agency.api`); on a
   log of several partitions (`--partitions N`), the stream and subject of the thread's
   partition (`AGENCY_EVENTS_<p>`, `tenant.<t>.evt.<p>.thread.<id>`; docs/scaling.md);
2. publishes a `runtime.invoke` command on `tenant.<t>.cmd.runtime.invoke` through
   JetStream, with `Nats-Msg-Id` as the idempotency key (a repeat is stored once);
3. prints every event of the thread as one JSON line until its run ends (a run's end is
   told by the header, before the body is looked at).

Exit status: 0 when the run completed, 1 when it ended in error or was canceled, 2 when it
did not end within `--timeout` seconds.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import secrets
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import nats
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy

EVENTS_STREAM = "AGENCY_EVENTS"
TERMINAL = {"run.completed": 0, "run.error": 1, "run.canceled": 1}
# Every event's type, on its message: filter on it without decoding the body.
EVENT_TYPE_HEADER = "Agency-Event-Type"


def invoke_command(
    tenant: str, agency: str, thread: str, run_id: str, text: str, key: str
) -> dict[str, Any]:
    """A `runtime.invoke` command envelope, as `commands/runtime.invoke.json` describes it."""
    return {
        "command_id": secrets.token_hex(13),
        "tenant_id": tenant,
        "idempotency_key": key,
        "ts": datetime.now(UTC).isoformat(),
        "type": "runtime.invoke",
        "version": 1,
        "payload": {
            "type": "runtime.invoke",
            "agency_id": agency,
            "thread_id": thread,
            "run_id": run_id,
            "messages": [{"role": "user", "content": text}],
            "strategy": "queue",
        },
    }


def partition(aggregate_id: str, partitions: int) -> int:
    """The partition of an aggregate on a log of `partitions` streams: FNV-1a (32 bits) of
    its id, modulo the count (what NATS's `{{partition(n, …)}}` mapping computes)."""
    h = 0x811C9DC5
    for byte in aggregate_id.encode():
        h = ((h ^ byte) * 0x01000193) & 0xFFFFFFFF
    return h % partitions


def thread_stream_and_subject(tenant: str, thread: str, partitions: int) -> tuple[str, str]:
    """Where a thread's events are: `AGENCY_EVENTS` and `tenant.<t>.evt.thread.<id>` on a
    log of one partition; `AGENCY_EVENTS_<p>` and `tenant.<t>.evt.<p>.thread.<id>` else."""
    if partitions <= 1:
        return EVENTS_STREAM, f"tenant.{tenant}.evt.thread.{thread}"
    p = partition(thread, partitions)
    return f"{EVENTS_STREAM}_{p}", f"tenant.{tenant}.evt.{p}.thread.{thread}"


def check_against_schema(command: dict[str, Any], schemas: Path) -> None:
    """The fields the published schema requires are there (envelope and payload)."""
    schema = json.loads((schemas / "commands" / "runtime.invoke.json").read_text())
    missing = [f for f in schema["required"] if f not in command]
    payload_ref = schema["properties"]["payload"]["$ref"].rsplit("/", 1)[1]
    payload_schema = schema["$defs"][payload_ref]
    missing += [
        f"payload.{f}" for f in payload_schema.get("required", []) if f not in command["payload"]
    ]
    if missing:
        raise SystemExit(f"the command lacks fields the schema requires: {', '.join(missing)}")


async def run(args: argparse.Namespace) -> int:
    errors: list[str] = []

    async def on_error(error: Exception) -> None:
        errors.append(str(error))
        print(f"nats: {error}", file=sys.stderr)

    nc = await nats.connect(
        servers=args.servers.split(","),
        user=args.user,
        password=args.password,
        inbox_prefix=args.inbox_prefix,
        error_cb=on_error,
        connect_timeout=5,
    )
    try:
        js = nc.jetstream(timeout=10, prefix=args.js_api_prefix)
        run_id = "run_" + secrets.token_hex(12)
        key = args.idempotency_key or secrets.token_hex(12)
        command = invoke_command(args.tenant, args.agency, args.thread, run_id, args.message, key)
        if args.schemas:
            check_against_schema(command, Path(args.schemas))

        # Follow before invoking, so no event of the run is missed.
        deliver = nc.new_inbox()
        events: asyncio.Queue[tuple[str, dict[str, Any]]] = asyncio.Queue()

        async def on_event(msg: Any) -> None:
            if msg.data:  # idle heartbeats and flow control carry no data
                kind = (msg.headers or {}).get(EVENT_TYPE_HEADER, "")
                await events.put((kind, json.loads(msg.data)))

        await nc.subscribe(deliver, cb=on_event)
        stream, subject = thread_stream_and_subject(args.tenant, args.thread, args.partitions)
        await js.add_consumer(
            stream,
            ConsumerConfig(
                name=f"follow-{secrets.token_hex(8)}",
                filter_subject=subject,
                deliver_subject=deliver,
                deliver_policy=DeliverPolicy.NEW,
                ack_policy=AckPolicy.NONE,
                inactive_threshold=30.0,  # the server removes it once we are gone
            ),
        )
        subject = f"tenant.{args.tenant}.cmd.runtime.invoke"
        ack = await js.publish(
            subject,
            json.dumps(command).encode(),
            headers={"Nats-Msg-Id": f"{args.tenant}:runtime.invoke:{key}"},
        )
        print(json.dumps({"invoked": run_id, "command_seq": ack.seq}), flush=True)

        async def until_terminal() -> int:
            while True:
                kind, event = await events.get()
                print(json.dumps(event), flush=True)
                if kind in TERMINAL and event.get("run_id") == run_id:
                    return TERMINAL[kind]

        try:
            return await asyncio.wait_for(until_terminal(), timeout=args.timeout)
        except TimeoutError:
            print(f"the run did not end within {args.timeout} s", file=sys.stderr)
            return 2
    finally:
        await nc.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--servers", required=True, help="comma-separated NATS URLs")
    parser.add_argument("--user", required=True)
    parser.add_argument("--password", required=True)
    parser.add_argument("--inbox-prefix", required=True, help="the tenant's private inbox prefix")
    parser.add_argument(
        "--js-api-prefix",
        default="agency.api",
        help="the JetStream API prefix of the tenant's account (jsApiPrefix in the credentials)",
    )
    parser.add_argument("--tenant", required=True)
    parser.add_argument("--agency", required=True)
    parser.add_argument("--thread", required=True)
    parser.add_argument("--message", required=True)
    parser.add_argument("--idempotency-key", default=None)
    parser.add_argument(
        "--partitions",
        type=int,
        default=1,
        help="the deployment's AGENCY_EVENT_PARTITIONS (docs/scaling.md)",
    )
    parser.add_argument(
        "--schemas", default=None, help="a directory from `agency contracts schema`"
    )
    parser.add_argument("--timeout", type=float, default=60.0)
    return asyncio.run(run(parser.parse_args()))


if __name__ == "__main__":
    sys.exit(main())
