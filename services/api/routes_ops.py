"""Operators' routes (admin): Prometheus metrics and the dead-letter stream."""

from __future__ import annotations

import base64
from typing import Annotated

from litestar import MediaType, Response, delete, get, post
from litestar.exceptions import ClientException, NotFoundException
from litestar.params import PathParameter, QueryParameter

from agency.contracts.http import Out
from agency.infra.jetstream import dlq_admin
from agency.infra.jetstream.dlq_admin import DeadLetterError, LetterFields, LetterInfo
from agency.services.api.auth import ADMIN_OPT, Deps, path_id
from agency.services.api.openapi import error_response

# Letters' sequences: JetStream's are 64-bit; the bound is one a JSON number states exactly.
MAX_SEQ = 2**53
Seq = Annotated[
    int, PathParameter(name="seq", description="The letter's sequence.", ge=1, le=MAX_SEQ)
]
PROMETHEUS = "text/plain; version=0.0.4; charset=utf-8"


class LetterOut(Out, LetterFields, frozen=True, kw_only=True):
    replayable: bool
    # With `GET /dlq/{seq}` only: the message as text, or base64 when it is not UTF-8.
    data: str | None = None
    data_encoding: str | None = None


class ReplayOut(Out, frozen=True, kw_only=True):
    seq: int
    command_seq: int


def _out(letter: LetterInfo, with_data: bool = False) -> LetterOut:
    data: str | None = None
    encoding: str | None = None
    if with_data:
        try:
            data, encoding = letter.data.decode(), "utf-8"
        except UnicodeDecodeError:
            data, encoding = base64.b64encode(letter.data).decode(), "base64"
    recorded = {name: getattr(letter, name) for name in LetterFields.__struct_fields__}
    return LetterOut(
        **recorded,
        replayable=letter.replayable,
        data=data,
        data_encoding=encoding,
    )


@get(
    "/metrics",
    opt={ADMIN_OPT: True},
    media_type=MediaType.TEXT,
    summary="Prometheus metrics (admin)",
)
async def metrics(deps: Deps) -> Response[bytes]:
    body = await deps.metrics.render(deps.pool, deps.bus.js)
    return Response(body, media_type=PROMETHEUS)


@get("/dlq", opt={ADMIN_OPT: True}, summary="Dead letters, oldest first (admin)")
async def list_dead_letters(
    deps: Deps,
    from_seq: Annotated[int, QueryParameter(name="fromSeq", ge=1, le=MAX_SEQ)] = 1,
    limit: Annotated[int, QueryParameter(ge=1, le=dlq_admin.MAX_PAGE)] = 50,
    tenant: Annotated[str | None, QueryParameter()] = None,
    reason: Annotated[str | None, QueryParameter()] = None,
) -> list[LetterOut]:
    if tenant is not None:
        path_id("tenant id", tenant)
    if reason is not None:
        path_id("reason", reason)
    letters = await dlq_admin.list_letters(
        deps.bus.js, from_seq=from_seq, limit=limit, tenant=tenant, reason=reason
    )
    return [_out(letter) for letter in letters]


@get("/dlq/{seq:int}", opt={ADMIN_OPT: True}, summary="One dead letter with its message (admin)")
async def show_dead_letter(seq: Seq, deps: Deps) -> LetterOut:
    try:
        return _out(await dlq_admin.get_letter(deps.bus.js, seq), with_data=True)
    except DeadLetterError as e:
        raise NotFoundException(str(e)) from e


@post(
    "/dlq/{seq:int}/replay",
    status_code=200,
    opt={ADMIN_OPT: True},
    responses={409: error_response(409, "The letter is not a command: it cannot be re-driven.")},
    summary="Send a dead-lettered command again and remove the letter (admin)",
)
async def replay_dead_letter(seq: Seq, deps: Deps) -> ReplayOut:
    try:
        letter = await dlq_admin.get_letter(deps.bus.js, seq)
    except DeadLetterError as e:
        raise NotFoundException(str(e)) from e
    try:
        command_seq = await dlq_admin.replay(deps.bus.js, letter.seq)
    except DeadLetterError as e:
        raise ClientException(status_code=409, detail=str(e)) from e
    return ReplayOut(seq=seq, command_seq=command_seq)


@delete("/dlq/{seq:int}", status_code=204, opt={ADMIN_OPT: True}, summary="Drop a dead letter")
async def drop_dead_letter(seq: Seq, deps: Deps) -> None:
    try:
        await dlq_admin.drop(deps.bus.js, seq)
    except DeadLetterError as e:
        raise NotFoundException(str(e)) from e


OPS_ROUTES = [metrics, list_dead_letters, show_dead_letter, replay_dead_letter, drop_dead_letter]
