"""A task's push-notification configs: Create, Get, List and Delete, whichever binding
carries them.

A config is a fact of the agency's log (`push.configured`, `push.removed`, through the
registry as a webhook subscription is), read back from `push_configs`; the webhooks
service POSTs each of the task's status changes to it (`services/webhooks/push.py`). Its
URL meets the egress rule here and on every delivery. Its token and authentication are
sealed on the log and in the read model, and answered to the task's tenant only.

A config without an id takes the task's (as the A2A SDK's servers do), so a message sent
again with its config configures the same one; a config created again with the id of one
of the task's replaces it. Deleting a config the task does not have succeeds (the operation is
idempotent, as the specification has it); another tenant's task, or another agent's, is
not found.
"""

from __future__ import annotations

import re

from agency.contracts.commands import ConfigurePush, RemovePush
from agency.infra.sealing import seal, unseal
from agency.services.a2a.push import CREDENTIALS_NAME, SCHEME_NAME, TOKEN_NAME
from agency.services.a2a.tasks import RunTask
from agency.services.a2a.wire import (
    AuthenticationInfo,
    ListPushConfigsResponse,
    TaskPushNotificationConfig,
)
from agency.services.api.a2a.agent import Agent
from agency.services.api.a2a.errors import InvalidParams, TaskNotFound
from agency.services.api.readback import send_and_read
from agency.services.webhook_signing import MAX_URL, url_problem

# A task's configs at most: each status change is POSTed to every one.
MAX_CONFIGS = 10
DEFAULT_PAGE = 10
_CONFIG_ID = re.compile(r"^[\x21-\x7e]{1,200}$")
# An HTTP authentication scheme is a token (RFC 9110 §5.6.2).
_SCHEME = re.compile(r"^[!#$%&'*+\-.^_`|~0-9A-Za-z]{1,64}$")
# What a header value may hold: visible ASCII and spaces, nothing that ends the header.
_HEADER_VALUE = re.compile(r"^[\x20-\x7e]{0,4096}$")

_ONE = """
SELECT config_id, url, sealed_auth FROM push_configs
WHERE tenant_id = $1 AND agency_id = $2 AND task_id = $3 AND config_id = $4
"""
_ALL = """
SELECT config_id, url, sealed_auth FROM push_configs
WHERE tenant_id = $1 AND agency_id = $2 AND task_id = $3 AND config_id > $4
ORDER BY config_id LIMIT $5
"""
_COUNT = """
SELECT count(*) FROM push_configs
WHERE tenant_id = $1 AND agency_id = $2 AND task_id = $3 AND config_id <> $4
"""


def _sealed(config: TaskPushNotificationConfig) -> str:
    """What authenticates the config's POSTs, checked and sealed."""
    if not _HEADER_VALUE.fullmatch(config.token):
        raise InvalidParams("token must be at most 4096 printable ASCII characters")
    values = {TOKEN_NAME: config.token} if config.token else {}
    auth = config.authentication
    if auth is not None and (auth.scheme or auth.credentials):
        if not _SCHEME.fullmatch(auth.scheme):
            raise InvalidParams(
                "authentication.scheme must be an HTTP authentication scheme (Bearer, Basic, …)"
            )
        if not auth.credentials or not _HEADER_VALUE.fullmatch(auth.credentials):
            raise InvalidParams(
                "authentication.credentials must be 1 to 4096 printable ASCII characters"
            )
        values |= {SCHEME_NAME: auth.scheme, CREDENTIALS_NAME: auth.credentials}
    return seal(values)


def _config(task: str, config_id: str, url: str, sealed: str) -> TaskPushNotificationConfig:
    values = unseal(sealed)
    scheme, credentials = values.get(SCHEME_NAME), values.get(CREDENTIALS_NAME)
    return TaskPushNotificationConfig(
        id=config_id,
        task_id=task,
        url=url,
        token=values.get(TOKEN_NAME, ""),
        authentication=(
            AuthenticationInfo(scheme=scheme, credentials=credentials or "") if scheme else None
        ),
    )


def _config_id(value: str) -> str:
    if not _CONFIG_ID.fullmatch(value):
        raise InvalidParams(
            "the config's id must be 1 to 200 printable ASCII characters without spaces"
        )
    return value


async def configure(
    agent: Agent, run: RunTask, config: TaskPushNotificationConfig
) -> TaskPushNotificationConfig:
    """The task's config, stored once every read model has it (or once the log has it,
    if they lag): its deliveries begin with the task's next status change."""
    if not config.url:
        raise InvalidParams("url is required: where the task's updates are POSTed")
    if len(config.url) > MAX_URL or (problem := url_problem(config.url)) is not None:
        raise InvalidParams(f"url refused: {problem or 'too long'}")
    config_id = _config_id(config.id) if config.id else run.id
    sealed = _sealed(config)
    deps, tenant, agency = agent.deps, agent.tenant, agent.agency_id
    others = await deps.pool.fetchval(_COUNT, tenant, agency, run.id, config_id)
    if others >= MAX_CONFIGS:
        raise InvalidParams(
            f"task {run.id} has {MAX_CONFIGS} push notification configs already: delete one first"
        )
    command = ConfigurePush(
        agency_id=agency, task_id=run.id, config_id=config_id, url=config.url, sealed_auth=sealed
    )
    await send_and_read(deps, tenant, "agency", agency, command, from_end=True)
    return _config(run.id, config_id, config.url, sealed)


async def get(agent: Agent, run: RunTask, config_id: str) -> TaskPushNotificationConfig:
    _config_id(config_id)
    row = await agent.deps.pool.fetchrow(
        _ONE, agent.tenant, agent.agency_id, run.id, config_id[:200]
    )
    if row is None:
        raise TaskNotFound(config_id, f"push notification config of task {run.id}:")
    return _config(run.id, row["config_id"], row["url"], row["sealed_auth"])


async def listed(
    agent: Agent, run: RunTask, page_size: int | None, page_token: str
) -> ListPushConfigsResponse:
    """The task's configs by id, a page at a time (`nextPageToken`: the last id given)."""
    if page_size is not None and not 0 <= page_size <= 100:
        raise InvalidParams("pageSize must be between 0 and 100")
    size = page_size or DEFAULT_PAGE
    rows = await agent.deps.pool.fetch(
        _ALL, agent.tenant, agent.agency_id, run.id, page_token[:200], size + 1
    )
    page = [_config(run.id, r["config_id"], r["url"], r["sealed_auth"]) for r in rows[:size]]
    more = len(rows) > size
    return ListPushConfigsResponse(configs=page, next_page_token=page[-1].id if more else "")


async def delete(agent: Agent, run: RunTask, config_id: str) -> None:
    _config_id(config_id)
    deps, tenant, agency = agent.deps, agent.tenant, agent.agency_id
    if await deps.pool.fetchrow(_ONE, tenant, agency, run.id, config_id) is None:
        return
    command = RemovePush(agency_id=agency, task_id=run.id, config_id=config_id)
    await send_and_read(deps, tenant, "agency", agency, command, from_end=True)
