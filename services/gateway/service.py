"""The gateway: the one way a tenant's account writes to `AGENCY` or shapes a consumer.

It answers what tenants' accounts send on `gw.<tenant>.<kind>.<rest>` (the broker puts the
tenant in the subject from the account the request came from; a tenant cannot choose it):

- `cmd`: a command for `tenant.<t>.cmd.<rest>`, stored in the commands stream (on a log in
  partitions, the stream of the partition of the aggregate it is for) with its
  `Nats-Msg-Id` in the tenant's own namespace (`<t>:` put in front unless it is there),
  so no tenant can take another's duplicate id; of its headers only the id and
  non-`Nats-` headers pass (no rollup, TTL, batch or expectation headers on a stream it
  shares). The stream's acknowledgement is the answer.
- `consumer`: `$JS.API.CONSUMER.CREATE` for the events stream, checked field by field
  (`services/gateway/consumers.py`) and refused where the name is another's.

Each tenant has a bound on its requests in flight, so one tenant's flood is answered with
an error at once rather than queued in front of the others; and once the gateway is
saturated (its requests in flight at the limit measured from how fast the broker answers,
`services/tenancy/admission.py`), a tenant at its share is answered 429 with the seconds to
wait, in the description and a `Retry-After` header, before its request is forwarded. A
command is refused the same way once the commands stream holds many waiting for the
services and the tenant has its share of them (`backlog.py`). It never raises: whatever
fails is answered as a JetStream API error.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections import Counter
from typing import Any

import msgspec
import structlog
from nats.aio.msg import Msg
from nats.errors import Error as NatsError

from agency.contracts.partitions import command_aggregate
from agency.contracts.subjects import VIA_GATEWAY_HEADER
from agency.infra.jetstream.connection import Bus
from agency.infra.jetstream.responders import Requests
from agency.infra.nats_accounts import GATEWAY_SUBJECTS
from agency.services.gateway.backlog import CommandBacklog
from agency.services.gateway.consumers import Refused, checked_create, owner
from agency.services.tenancy.admission import Admission, Refused as OverShare, Ticket

log = structlog.get_logger(__name__)

QUEUE = "gateway"
MAX_REQUEST_BYTES = 1 << 20
_FORWARD_TIMEOUT = 10.0
_CREATE_RESPONSE = "io.nats.jetstream.api.v1.consumer_create_response"
_PUB_RESPONSE = "io.nats.jetstream.api.v1.pub_ack_response"


class _Aggregates(msgspec.Struct):
    """The ids a command's partition is hashed from: clear in every command, sealed or not."""

    thread_id: object = None
    agency_id: object = None


class _Routed(msgspec.Struct):
    payload: _Aggregates = msgspec.field(default_factory=_Aggregates)


_routed = msgspec.json.Decoder(_Routed)

# Commands only the operator sends (over the admin's HTTP routes): a tenant's own
# credentials may not raise its budget.
OPERATOR_COMMANDS = frozenset({"registry.set_tenant_budget"})


class Gateway:
    """Answers tenants' accounts; `max_in_flight_per_tenant` bounds each tenant's share."""

    def __init__(
        self,
        bus: Bus,
        *,
        max_in_flight_per_tenant: int = 64,
        admission: Admission | None = None,
    ) -> None:
        self._bus = bus
        self._limit = max_in_flight_per_tenant
        self._admission = admission or Admission()
        self._in_flight: Counter[str] = Counter()
        self._requests = Requests(GATEWAY_SUBJECTS, queue=QUEUE)
        self.backlog = CommandBacklog(self._admission.settings, layout=bus.layout)

    async def run(self, stop: asyncio.Event, *, drain_timeout: float = 10.0) -> None:
        log.info("gateway running", subjects=GATEWAY_SUBJECTS)
        async with asyncio.TaskGroup() as tg:
            tg.create_task(self.backlog.watching(self._bus.nc, stop))
            await self._requests.serve(self._bus.nc, self._on_msg, stop, drain_timeout)

    async def _on_msg(self, msg: Msg) -> None:
        tokens = msg.subject.split(".", 3)
        if len(tokens) < 4:
            return
        tenant, kind = tokens[1], tokens[2]
        if self._in_flight[tenant] >= self._limit:
            await _answer(msg, _error(kind, 429, "too many requests in flight; retry later"))
            return
        ticket: Ticket | None = None
        if self._admission.enabled:
            try:
                ticket = self._admission.enter(tenant, time.monotonic(), len(msg.data))
            except OverShare as refused:
                await self._refuse(msg, _error(kind, 429, str(refused)), refused.retry_after)
                return
        if kind == "cmd" and (waiting := self.backlog.refusal(tenant)) is not None:
            if ticket is not None:
                ticket.done(time.monotonic(), sample=False)
            await self._refuse(msg, _error(kind, 429, str(waiting)), waiting.retry_after)
            return
        self._in_flight[tenant] += 1
        self._requests.start(
            self._handle(msg, tenant, kind, tokens[3]), lambda: self._done(tenant, ticket)
        )

    async def _refuse(self, msg: Msg, data: bytes, retry_after: int) -> None:
        """Answer with `Retry-After` beside the error (a JetStream reply has no other
        place for it)."""
        if not msg.reply:
            return
        try:
            await self._bus.nc.publish(msg.reply, data, headers={"Retry-After": str(retry_after)})
        except NatsError as e:
            log.warning("gateway could not answer", subject=msg.subject, error=str(e))

    def _done(self, tenant: str, ticket: Ticket | None) -> None:
        if ticket is not None:
            ticket.done(time.monotonic())
        self._in_flight[tenant] -= 1
        if self._in_flight[tenant] <= 0:
            del self._in_flight[tenant]

    async def _handle(self, msg: Msg, tenant: str, kind: str, rest: str) -> None:
        try:
            if len(msg.data) > MAX_REQUEST_BYTES:
                raise Refused(f"request larger than {MAX_REQUEST_BYTES} bytes", code=413)
            if kind == "cmd":
                answer = await self._command(msg, tenant, rest)
            elif kind == "consumer" or kind.startswith("consumer_"):
                answer = await self._create_consumer(msg, tenant, kind, rest)
            else:
                raise Refused(f"unknown gateway request {kind!r}", code=404)
        except Refused as e:
            log.info("gateway refused", tenant=tenant, kind=kind, reason=e.description)
            answer = _error(kind, e.code, e.description)
        except (NatsError, TimeoutError) as e:
            log.warning("gateway could not forward", tenant=tenant, kind=kind, error=str(e))
            answer = _error(kind, 503, "the broker did not answer in time; retry")
        except Exception:
            log.exception("gateway request failed", tenant=tenant, kind=kind)
            answer = _error(kind, 500, "the gateway could not handle the request")
        await _answer(msg, answer)

    async def _command(self, msg: Msg, tenant: str, rest: str) -> bytes:
        if rest in OPERATOR_COMMANDS:
            raise Refused(f"{rest} is the operator's command", code=403)
        headers = {
            k: v
            for k, v in (msg.headers or {}).items()
            if not k.lower().startswith("nats-") and k.lower() != VIA_GATEWAY_HEADER.lower()
        }
        # The command consumers share their room among tenants by this mark.
        headers[VIA_GATEWAY_HEADER] = "1"
        msg_id = (msg.headers or {}).get("Nats-Msg-Id")
        if msg_id:
            own = f"{tenant}:"
            headers["Nats-Msg-Id"] = msg_id if msg_id.startswith(own) else own + msg_id
        subject = self._command_subject(tenant, rest, msg.data)
        reply = await self._bus.nc.request(
            subject, msg.data, timeout=_FORWARD_TIMEOUT, headers=headers
        )
        self.backlog.stored(tenant)
        return reply.data

    def _command_subject(self, tenant: str, rest: str, data: bytes) -> str:
        """Where the command is stored: `tenant.<t>.cmd.<rest>`, with the partition of the
        aggregate it is for on a log in partitions (a command that is not one is stored as
        sent, for the service to dead-letter with its reason)."""
        layout = self._bus.layout
        if not layout.partitioned:
            return f"tenant.{tenant}.cmd.{rest}"
        try:
            ids = _routed.decode(data).payload
        except msgspec.DecodeError:
            ids = _Aggregates()
        aggregate = command_aggregate(tenant, ids.thread_id, ids.agency_id)
        return f"tenant.{tenant}.cmd.{layout.partition(aggregate)}.{rest}"

    async def _create_consumer(self, msg: Msg, tenant: str, kind: str, rest: str) -> bytes:
        layout = self._bus.layout
        partition = kind.removeprefix("consumer_") if kind != "consumer" else "0"
        if not partition.isdigit() or int(partition) >= layout.partitions:
            raise Refused(f"unknown gateway request {kind!r}", code=404)
        stream = layout.stream(int(partition))
        if (kind == "consumer") == layout.partitioned:
            raise Refused(f"the events log has {layout.partitions} partition(s)", code=404)
        name = rest.split(".", 1)[0]
        request = checked_create(tenant, name, msg.data, stream, int(partition))
        info = await self._info(stream, name)
        if info is not None and owner(info) != tenant:
            raise Refused(f"consumer name {name!r} is in use; choose another")
        action = "create" if info is None else "update"
        body = msgspec.json.encode(msgspec.structs.replace(request, action=action))
        reply = await self._bus.nc.request(
            f"$JS.API.CONSUMER.CREATE.{stream}.{rest}", body, timeout=_FORWARD_TIMEOUT
        )
        return reply.data

    async def _info(self, stream: str, name: str) -> dict[str, Any] | None:
        reply = await self._bus.nc.request(
            f"$JS.API.CONSUMER.INFO.{stream}.{name}", b"", timeout=_FORWARD_TIMEOUT
        )
        info: dict[str, Any] = json.loads(reply.data)
        error = info.get("error")
        if error is None:
            return info
        if error.get("code") == 404:
            return None
        raise Refused(str(error.get("description", "consumer info failed")), code=503)


def _error(kind: str, code: int, description: str) -> bytes:
    kind_type = _CREATE_RESPONSE if kind == "consumer" else _PUB_RESPONSE
    return json.dumps(
        {"type": kind_type, "error": {"code": code, "err_code": 0, "description": description}}
    ).encode()


async def _answer(msg: Msg, data: bytes) -> None:
    if not msg.reply:
        return
    try:
        await msg.respond(data)
    except NatsError as e:
        log.warning("gateway could not answer", subject=msg.subject, error=str(e))


async def run_gateway(nats_url: str, stop: asyncio.Event) -> None:
    async with Bus(nats_url, name="agency-gateway") as bus:
        await Gateway(bus).run(stop)
