"""Tenant B's flood over NATS, with only the tenant's credentials, in a process of its own.

`python -m bench.nats_flood --servers … --user … --password … --inbox-prefix … --tenant …
--agency … --threads T1,T2 --seconds 30` publishes (until the seconds pass or SIGTERM), as
hard as `--workers` requests at
once allow, on the tenant's command subjects (as `docs/nats.md` says an integrator does:
a request to `tenant.<t>.cmd.<service>.<verb>` answered with the stream's acknowledgement,
or an error): `runtime.invoke` on the given threads, one in eight with a 200 KB message,
and `registry.create_thread` of new threads. Nothing is imported from Agency. It prints one
JSON line: the answers by `kind outcome` (`ok`, the error code, `timeout`, `no responders`),
the 429s by what the tenant held too much of, 429s whose `Retry-After` header disagrees with
their message, and the run ids and thread ids the acknowledged commands named.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import re
import secrets
import signal
import sys
from collections import Counter
from datetime import UTC, datetime
from typing import Any

import nats
from nats.aio.client import Client as NATS
from nats.errors import NoRespondersError, TimeoutError as NatsTimeout

# Under the invoke's default size limit (256 KB): the door does not refuse it for that.
BIG_MESSAGE = "x" * 200_000
AGENT = "fair"
_RETRY_IN = re.compile(r"retry in (\d+) s")


def _envelope(tenant: str, kind: str, payload: dict[str, Any]) -> dict[str, Any]:
    return {
        "command_id": secrets.token_hex(13),
        "tenant_id": tenant,
        "idempotency_key": secrets.token_hex(12),
        "ts": datetime.now(UTC).isoformat(),
        "type": kind,
        "version": 1,
        "payload": {"type": kind, **payload},
    }


def _refused_for(description: str) -> str:
    """What a 429 says the tenant held too much of: its commands waiting for the services,
    its places in the gateway's requests in progress, or its requests in flight."""
    if "commands waiting" in description:
        return "commands waiting"
    if "places taken" in description:
        return "gateway places"
    return "in flight"


class Flood:
    def __init__(self, nc: NATS, tenant: str, agency: str, threads: list[str]) -> None:
        self.nc = nc
        self.tenant = tenant
        self.agency = agency
        self.threads = threads
        self.answers: Counter[str] = Counter()
        self.retry_after_wrong = 0
        # 429s by what the tenant held too much of (`_refused_for`).
        self.refused_for: Counter[str] = Counter()
        self.examples: list[str] = []
        self.runs: list[str] = []
        self.created: list[str] = []

    async def send(self, kind: str, label: str, payload: dict[str, Any]) -> bool:
        envelope = _envelope(self.tenant, kind, payload)
        service, verb = kind.split(".")
        subject = f"tenant.{self.tenant}.cmd.{service}.{verb}"
        msg_id = f"{self.tenant}:{kind}:{envelope['idempotency_key']}"
        try:
            reply = await self.nc.request(
                subject, json.dumps(envelope).encode(), timeout=10,
                headers={"Nats-Msg-Id": msg_id},
            )  # fmt: skip
        except NatsTimeout:
            self.answers[f"{label} timeout"] += 1
            return False
        except NoRespondersError:
            self.answers[f"{label} no responders"] += 1
            return False
        answer = json.loads(reply.data or b"{}")
        error = answer.get("error")
        if error is None:
            self.answers[f"{label} ok"] += 1
            return True
        code = int(error.get("code", 0))
        self.answers[f"{label} {code}"] += 1
        description = str(error.get("description", ""))
        if code == 429:
            self.refused_for[_refused_for(description)] += 1
            said = _RETRY_IN.search(description)
            header = (reply.headers or {}).get("Retry-After")
            if said is not None and said.group(1) != header:
                self.retry_after_wrong += 1
        if code != 429 and len(self.examples) < 5:
            self.examples.append(f"{label}: {code}: {description[:300]}")
        return False

    async def create(self) -> None:
        thread = "th" + secrets.token_hex(12)
        payload = {"agency_id": self.agency, "thread_id": thread, "agent_type": AGENT}
        if await self.send("registry.create_thread", "create", payload):
            self.created.append(thread)

    async def invoke(self, n: int, big: bool) -> None:
        thread = self.threads[n % len(self.threads)]
        run_id = "run_" + secrets.token_hex(12)
        text = BIG_MESSAGE if big else f"flood {n}"
        payload = {
            "agency_id": self.agency, "thread_id": thread, "run_id": run_id,
            "messages": [{"role": "user", "content": text}], "strategy": "queue",
        }  # fmt: skip
        if await self.send("runtime.invoke", "big invoke" if big else "invoke", payload):
            self.runs.append(run_id)

    async def worker(self, index: int, stop: asyncio.Event) -> None:
        n = index
        while not stop.is_set():
            n += 1
            match n % 8:
                case 0:
                    await self.create()
                case 1:
                    await self.invoke(n, big=True)
                case _:
                    await self.invoke(n, big=False)


async def flood(args: argparse.Namespace) -> dict[str, Any]:
    errors: list[str] = []

    async def on_error(error: Exception) -> None:
        errors.append(str(error))

    nc = await nats.connect(
        servers=args.servers.split(","), user=args.user, password=args.password,
        inbox_prefix=args.inbox_prefix, error_cb=on_error, connect_timeout=5,
    )  # fmt: skip
    try:
        load = Flood(nc, args.tenant, args.agency, args.threads.split(","))
        stop = asyncio.Event()
        # SIGTERM ends the flood early, with its summary.
        asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
        tasks = [asyncio.create_task(load.worker(i, stop)) for i in range(args.workers)]
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), timeout=args.seconds)  # the flood's duration
        stop.set()
        await asyncio.wait_for(asyncio.gather(*tasks), timeout=60)
    finally:
        await nc.close()
    return {
        "answers": dict(load.answers),
        "retry_after_wrong": load.retry_after_wrong,
        "refused_for": dict(load.refused_for),
        "examples": load.examples,
        "errors": errors[:5],
        "runs": load.runs,
        "created": load.created,
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Tenant B's flood over NATS (one JSON line).")
    parser.add_argument("--servers", required=True)
    parser.add_argument("--user", required=True)
    parser.add_argument("--password", required=True)
    parser.add_argument("--inbox-prefix", required=True)
    parser.add_argument("--tenant", required=True)
    parser.add_argument("--agency", required=True)
    parser.add_argument("--threads", required=True, help="comma-separated thread ids to invoke")
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--workers", type=int, default=32, help="requests at once")
    summary = asyncio.run(flood(parser.parse_args(argv)))
    sys.stdout.write(json.dumps(summary) + "\n")


if __name__ == "__main__":
    main()
