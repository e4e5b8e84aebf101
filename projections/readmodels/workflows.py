"""Workflows and their members, the channel, documents, proposals, and schedules."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import msgspec

from agency.contracts.envelope import Envelope
from agency.contracts.events import (
    ChannelMessagePosted,
    DocumentWritten,
    MemberAdded,
    MemberAnswered,
    MemberInvoked,
    ProposalClosed,
    ProposalOpened,
    ProposalVoted,
    ScheduleFired,
    ScheduleRemoved,
    ScheduleSet,
    WorkflowCreated,
    WorkflowStarted,
    WorkflowStopped,
)
from agency.projections.statements import Statement, statement_projection, upsert

WORKFLOWS_DDL = """
CREATE TABLE IF NOT EXISTS workflows (
    tenant_id     text        NOT NULL,
    workflow_id   text        NOT NULL,
    agency_id     text        NOT NULL,
    name          text        NOT NULL,
    tag           text        NOT NULL,
    status        text        NOT NULL,
    run_id        text,
    stop_reason   text        NOT NULL DEFAULT '',
    message_count integer     NOT NULL DEFAULT 0,
    limits        jsonb       NOT NULL,
    created_at    timestamptz NOT NULL,
    updated_at    timestamptz NOT NULL,
    PRIMARY KEY (tenant_id, workflow_id)
);
CREATE INDEX IF NOT EXISTS workflows_by_agency ON workflows (tenant_id, agency_id, created_at);
CREATE TABLE IF NOT EXISTS workflow_members (
    tenant_id   text NOT NULL,
    workflow_id text NOT NULL,
    member      text NOT NULL,
    blueprint   text NOT NULL,
    agent_type  text NOT NULL,
    thread_id   text NOT NULL,
    status      text NOT NULL,
    run_id      text,
    runs        integer NOT NULL DEFAULT 0,
    PRIMARY KEY (tenant_id, workflow_id, member)
);
CREATE TABLE IF NOT EXISTS channel_messages (
    tenant_id   text        NOT NULL,
    workflow_id text        NOT NULL,
    seq         integer     NOT NULL,
    message_id  text        NOT NULL,
    sender      text        NOT NULL,
    content     text        NOT NULL,
    mentions    text[]      NOT NULL,
    hop         integer     NOT NULL,
    run_id      text,
    posted_at   timestamptz NOT NULL,
    PRIMARY KEY (tenant_id, workflow_id, seq)
);
CREATE TABLE IF NOT EXISTS workflow_documents (
    tenant_id   text        NOT NULL,
    workflow_id text        NOT NULL,
    path        text        NOT NULL,
    content     text        NOT NULL,
    author      text        NOT NULL,
    updated_at  timestamptz NOT NULL,
    PRIMARY KEY (tenant_id, workflow_id, path)
);
CREATE TABLE IF NOT EXISTS workflow_proposals (
    tenant_id   text        NOT NULL,
    workflow_id text        NOT NULL,
    proposal_id text        NOT NULL,
    title       text        NOT NULL,
    description text        NOT NULL,
    author      text        NOT NULL,
    options     text[]      NOT NULL,
    voters      text[]      NOT NULL,
    votes       jsonb       NOT NULL,
    status      text        NOT NULL,
    outcome     text        NOT NULL DEFAULT '',
    tally       jsonb       NOT NULL,
    opened_at   timestamptz NOT NULL,
    PRIMARY KEY (tenant_id, workflow_id, proposal_id)
);
CREATE TABLE IF NOT EXISTS schedules (
    tenant_id   text        NOT NULL,
    schedule_id text        NOT NULL,
    agency_id   text        NOT NULL,
    name        text        NOT NULL,
    cron        text        NOT NULL,
    target      text        NOT NULL,
    workflow_id text,
    agent       text,
    message     text        NOT NULL,
    active      boolean     NOT NULL,
    last_tick   timestamptz,
    fired       integer     NOT NULL DEFAULT 0,
    updated_at  timestamptz NOT NULL,
    PRIMARY KEY (tenant_id, schedule_id)
);
CREATE INDEX IF NOT EXISTS schedules_by_agency ON schedules (tenant_id, agency_id, name);
ALTER TABLE schedules ADD COLUMN IF NOT EXISTS options jsonb NOT NULL DEFAULT '{}';
"""

_CREATED = (
    "INSERT INTO workflows (tenant_id, workflow_id, agency_id, name, tag, status, limits, "
    "created_at, updated_at) VALUES ($1, $2, $3, $4, $5, 'created', $6, $7, $7) "
    "ON CONFLICT (tenant_id, workflow_id) DO NOTHING"
)
_STATUS = (
    "UPDATE workflows SET status = $3, run_id = COALESCE($4, run_id), stop_reason = $5, "
    "updated_at = $6 WHERE tenant_id = $1 AND workflow_id = $2"
)
_MEMBER = (
    "INSERT INTO workflow_members (tenant_id, workflow_id, member, blueprint, agent_type, "
    "thread_id, status) VALUES ($1, $2, $3, $4, $5, $6, 'idle') "
    "ON CONFLICT (tenant_id, workflow_id, member) DO NOTHING"
)
_INVOKED = (
    "UPDATE workflow_members SET status = 'running', run_id = $4, runs = runs + 1 "
    "WHERE tenant_id = $1 AND workflow_id = $2 AND member = $3"
)
_ANSWERED = (
    "UPDATE workflow_members SET status = $4 "
    "WHERE tenant_id = $1 AND workflow_id = $2 AND member = $3"
)
_MESSAGE = (
    "INSERT INTO channel_messages (tenant_id, workflow_id, seq, message_id, sender, content, "
    "mentions, hop, run_id, posted_at) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10) "
    "ON CONFLICT (tenant_id, workflow_id, seq) DO NOTHING"
)
_COUNT = (
    "UPDATE workflows SET message_count = message_count + 1, updated_at = $3 "
    "WHERE tenant_id = $1 AND workflow_id = $2"
)
_DOCUMENT = upsert(
    "workflow_documents",
    ("tenant_id", "workflow_id", "path", "content", "author", "updated_at"),
    ("tenant_id", "workflow_id", "path"),
)
_OPENED = (
    "INSERT INTO workflow_proposals (tenant_id, workflow_id, proposal_id, title, description, "
    "author, options, voters, votes, status, tally, opened_at) "
    "VALUES ($1, $2, $3, $4, $5, $6, $7, $8, '{}', 'open', '{}', $9) "
    "ON CONFLICT (tenant_id, workflow_id, proposal_id) DO NOTHING"
)
_VOTED = (
    "UPDATE workflow_proposals SET votes = votes || jsonb_build_object($4::text, $5::text) "
    "WHERE tenant_id = $1 AND workflow_id = $2 AND proposal_id = $3"
)
_CLOSED = (
    "UPDATE workflow_proposals SET status = 'closed', outcome = $4, tally = $5 "
    "WHERE tenant_id = $1 AND workflow_id = $2 AND proposal_id = $3"
)
_SCHEDULE = (
    "INSERT INTO schedules (tenant_id, schedule_id, agency_id, name, cron, target, workflow_id, "
    "agent, message, active, updated_at, options) "
    "VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, true, $10, $11) "
    "ON CONFLICT (tenant_id, schedule_id) DO UPDATE SET name = EXCLUDED.name, "
    "cron = EXCLUDED.cron, target = EXCLUDED.target, workflow_id = EXCLUDED.workflow_id, "
    "agent = EXCLUDED.agent, message = EXCLUDED.message, active = true, "
    "updated_at = EXCLUDED.updated_at, options = EXCLUDED.options"
)
_REMOVED = (
    "UPDATE schedules SET active = false, updated_at = $3 WHERE tenant_id = $1 AND schedule_id = $2"
)
_FIRED = (
    "UPDATE schedules SET last_tick = $3, fired = fired + 1, updated_at = $4 "
    "WHERE tenant_id = $1 AND schedule_id = $2"
)


def _json(value: object) -> str:
    return msgspec.json.encode(value).decode()


def _statements(envelopes: Sequence[Envelope]) -> Iterable[Statement]:
    for env in envelopes:
        t, a, ts = env.tenant_id, env.aggregate_id, env.ts
        match env.payload:
            case WorkflowCreated(agency_id=agency, name=name, tag=tag, limits=limits):
                yield _CREATED, (t, a, agency, name, tag, _json(limits), ts)
            case MemberAdded() as m:
                yield _MEMBER, (t, a, m.member, m.blueprint, m.agent_type, m.thread_id)
            case WorkflowStarted(run_id=run_id):
                yield _STATUS, (t, a, "running", run_id, "", ts)
            case WorkflowStopped(reason=reason):
                yield _STATUS, (t, a, "stopped", None, reason, ts)
            case ChannelMessagePosted() as p:
                yield _MESSAGE, (
                    t, a, env.seq, p.message_id, p.sender, p.content,
                    list(p.mentions), p.hop, p.run_id, ts,
                )  # fmt: skip
                yield _COUNT, (t, a, ts)
            case MemberInvoked(member=member, run_id=run_id):
                yield _INVOKED, (t, a, member, run_id)
            case MemberAnswered(member=member, retrying=retrying):
                yield _ANSWERED, (t, a, member, "retrying" if retrying else "idle")
            case DocumentWritten(path=path, content=content, author=author):
                yield _DOCUMENT, (t, a, path, content, author, ts)
            case ProposalOpened() as o:
                yield _OPENED, (
                    t, a, o.proposal_id, o.title, o.description, o.author,
                    list(o.options), list(o.voters), ts,
                )  # fmt: skip
            case ProposalVoted(proposal_id=pid, voter=voter, choice=choice):
                yield _VOTED, (t, a, pid, voter, choice)
            case ProposalClosed(proposal_id=pid, outcome=outcome, tally=tally):
                yield _CLOSED, (t, a, pid, outcome, _json(tally))
            case ScheduleSet() as s:
                yield _SCHEDULE, (
                    t, a, s.agency_id, s.name, s.cron, s.target,
                    s.workflow_id, s.agent, s.message, ts, _json(s.options),
                )  # fmt: skip
            case ScheduleRemoved():
                yield _REMOVED, (t, a, ts)
            case ScheduleFired(tick=tick):
                yield _FIRED, (t, a, tick, ts)


_TABLES = (
    "workflows",
    "workflow_members",
    "channel_messages",
    "workflow_documents",
    "workflow_proposals",
    "schedules",
)
_HANDLES = {
    "workflow.created",
    "workflow.member_added",
    "workflow.started",
    "workflow.stopped",
    "channel.message_posted",
    "member.invoked",
    "member.answered",
    "document.written",
    "proposal.opened",
    "proposal.voted",
    "proposal.closed",
    "schedule.set",
    "schedule.removed",
    "schedule.fired",
}
PROJECTION = statement_projection("workflows", WORKFLOWS_DDL, _statements, _HANDLES, tables=_TABLES)
