"""Pure decisions on a workflow: its folded state and an intent → the events to append.

The controller, the context tools and the command handler all decide here, and append
with `decide_and_append`, so any number of them may act on one workflow at once: the
expected-sequence append lets one win, the others reload and decide again (usually
nothing). That is what keeps a member from running twice at once and a message from
being acted on twice.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Sequence

from agency.contracts.events import (
    AnyEvent,
    ChannelMessagePosted,
    MemberAnswered,
    MemberInvoked,
    MemberSkipped,
    ProposalClosed,
    ProposalOpened,
    ProposalVoted,
    ResourceStored,
    WorkflowStarted,
    WorkflowStopped,
)
from agency.contracts.events.workflow import MemberOutcome, RunOptions
from agency.contracts.ids import derived_id
from agency.domain.workflow_state import Invocation, Message, WorkflowState

SYSTEM = "system"
Decide = Callable[[WorkflowState], list[AnyEvent]]
_MENTION = re.compile(r"@([A-Za-z0-9_-]+)")


class WorkflowRejected(Exception):
    """An intent that can never apply (unknown member, closed proposal): say why."""


def member_thread_id(tenant_id: str, workflow_id: str, member: str) -> str:
    """Member threads have a recognisable prefix, so the controller can pass over every
    other thread's run terminals without reading anything."""
    return derived_id("wfm_", tenant_id, workflow_id, member)


def is_member_thread(thread_id: str) -> bool:
    return thread_id.startswith("wfm_")


def member_run_id(workflow_id: str, member: str, upto_seq: int, attempt: int = 1) -> str:
    return derived_id("run_", "workflow", workflow_id, member, str(upto_seq), str(attempt))


def workflow_run_id(workflow_id: str, seq: int) -> str:
    return derived_id("wfr_", workflow_id, str(seq))


def resource_id(content: str) -> str:
    return "sha256:" + hashlib.sha256(content.encode()).hexdigest()


def mentions_in(text: str, members: Sequence[str], sender: str) -> tuple[str, ...]:
    """Members named with `@name` in `text`, in order of first mention, never the sender."""
    found: list[str] = []
    for name in _MENTION.findall(text):
        if name in members and name != sender and name not in found:
            found.append(name)
    return tuple(found)


def prompt_for(state: WorkflowState, member: str, inbox: Sequence[Message]) -> str:
    """What a member's run is asked: the messages of its inbox it has not seen."""
    lines = [f"New messages for you (@{member}) in {state.display_name}:"]
    lines += [f"[@{m.sender}] {m.content}" for m in inbox]
    lines.append(
        "Your answer is posted to the channel. Mention a member (@name) to ask them to act; "
        "mention nobody when there is nothing more to do."
    )
    return "\n".join(lines)


# --- posting ------------------------------------------------------------------------------


def post(
    state: WorkflowState,
    *,
    message_id: str,
    sender: str,
    content: str,
    to: Sequence[str] = (),
    hop: int = 0,
    reply_to: str | None = None,
    run: RunOptions | None = None,
) -> list[AnyEvent]:
    """A message onto the channel. One from outside (a person, a schedule) starts a run of
    the workflow; a member may post only while a run goes on."""
    if state.status == "absent":
        raise WorkflowRejected(f"workflow {state.workflow_id} does not exist")
    if any(m.message_id == message_id for m in state.messages):
        return []
    unknown = [name for name in to if name not in state.members]
    if unknown:
        raise WorkflowRejected(
            f"no member named {', '.join(unknown)} in {state.display_name}; "
            f"members: {', '.join(sorted(state.members)) or 'none'}"
        )
    events: list[AnyEvent] = []
    run_id = state.run_id
    if sender not in state.members and sender != SYSTEM:
        # Each message from outside starts a run: the limits bound what one message sets off.
        run_id = workflow_run_id(state.workflow_id, state.last_seq + 1)
        events.append(WorkflowStarted(run_id=run_id))
        run_messages = 0
    elif state.status != "running":
        raise WorkflowRejected(f"{state.display_name} is not running")
    else:
        run_messages = state.run_messages
    mentioned = [*to, *mentions_in(content, list(state.members), sender)]
    events.append(
        ChannelMessagePosted(
            message_id=message_id,
            sender=sender,
            content=content,
            mentions=tuple(dict.fromkeys(n for n in mentioned if n != sender)),
            hop=hop,
            run_id=run_id,
            reply_to=reply_to,
            run=run,
        )
    )
    if sender != SYSTEM and run_messages + 1 >= state.limits.max_messages:
        events.append(
            WorkflowStopped(
                run_id=run_id,
                reason=f"message limit reached: {state.limits.max_messages} messages in a run",
            )
        )
    return events


def stop(state: WorkflowState, reason: str) -> list[AnyEvent]:
    if state.status == "absent":
        raise WorkflowRejected(f"workflow {state.workflow_id} does not exist")
    if state.status != "running":
        return []
    return [WorkflowStopped(run_id=state.run_id, reason=reason or "stopped")]


# --- the controller ----------------------------------------------------------------------


def dispatch(state: WorkflowState) -> list[AnyEvent]:
    """Start a run of every idle member with something in its inbox; a member never has
    two runs at once. Mentions past the hop limit, or made when the run has stopped, are
    skipped (and said so on the channel)."""
    events: list[AnyEvent] = []
    for name in sorted(state.members):
        pending = state.pending(name)
        if not pending or name in state.active:
            continue
        upto, hop = pending[-1].seq, max(m.hop for m in pending)
        if state.status != "running":
            events.append(MemberSkipped(member=name, upto_seq=upto, reason="workflow stopped"))
            continue
        if hop >= state.limits.max_hops:
            reason = f"hop limit reached: {state.limits.max_hops} answers in a row"
            events.append(MemberSkipped(member=name, upto_seq=upto, reason=reason))
            events.append(
                ChannelMessagePosted(
                    message_id=derived_id("msg_", "skip", state.workflow_id, name, str(upto)),
                    sender=SYSTEM,
                    content=f"@{name} was not asked to act: {reason}",
                    hop=hop,
                    run_id=state.run_id,
                )
            )
            continue
        events.append(
            MemberInvoked(
                member=name,
                run_id=member_run_id(state.workflow_id, name, upto),
                upto_seq=upto,
                hop=hop,
                prompt=prompt_for(state, name, pending),
                run=next((m.run for m in reversed(pending) if m.run is not None), None),
            )
        )
    return events


MEMBER_GONE = "its thread was deleted"


def answer(
    state: WorkflowState,
    *,
    run_id: str,
    outcome: MemberOutcome,
    text: str,
    mention: bool = True,
) -> list[AnyEvent]:
    """A member's run ended: post its answer (or, when retries are used up, its failure).
    Without `mention` a failure names the member without `@`, so it is not asked again
    (its thread was deleted: `MEMBER_GONE`)."""
    invocation = state.invocations.get(run_id)
    if invocation is None or run_id in state.answered:
        return []
    name = invocation.member
    if outcome == "error" and invocation.attempt < state.limits.max_attempts:
        return [
            MemberAnswered(member=name, run_id=run_id, outcome=outcome, error=text, retrying=True)
        ]
    message_id = derived_id("msg_", "answer", run_id)
    if outcome == "completed":
        content, sender = text, name
    else:
        at = "@" if mention else ""
        content, sender = f"{at}{name} failed ({outcome}): {text}".rstrip(": "), SYSTEM
    events: list[AnyEvent] = [
        MemberAnswered(
            member=name,
            run_id=run_id,
            outcome=outcome,
            message_id=message_id,
            error="" if outcome == "completed" else text,
        )
    ]
    if not content:
        return events
    if state.status == "running":
        return events + post(
            state,
            message_id=message_id,
            sender=sender,
            content=content,
            hop=invocation.hop + 1,
            reply_to=_last_message_id(state, invocation),
        )
    # A run that ends after its workflow stopped still has its answer recorded.
    late = ChannelMessagePosted(
        message_id=message_id,
        sender=sender,
        content=content,
        hop=invocation.hop + 1,
        run_id=state.run_id,
    )
    return [*events, late]


def retry(state: WorkflowState, member: str, failed_run_id: str) -> list[AnyEvent]:
    """The next attempt of a failed member run, for the same inbox."""
    current = state.active.get(member)
    if current is None or current.run_id != failed_run_id or member not in state.retrying:
        return []
    if state.status != "running":
        return [
            MemberAnswered(
                member=member, run_id=failed_run_id, outcome="canceled", error="workflow stopped"
            )
        ]
    attempt = current.attempt + 1
    return [
        MemberInvoked(
            member=member,
            run_id=member_run_id(state.workflow_id, member, current.upto_seq, attempt),
            upto_seq=current.upto_seq,
            hop=current.hop,
            prompt=current.prompt,
            attempt=attempt,
            run=current.run,
        )
    ]


def retry_delay(attempt: int) -> float:
    """Seconds before the next attempt after `attempt` failed: 1, 2, 4, … at most 30."""
    return float(min(2 ** max(attempt - 1, 0), 30))


def _last_message_id(state: WorkflowState, invocation: Invocation) -> str | None:
    seen = [m for m in state.inbox(invocation.member) if m.seq <= invocation.upto_seq]
    return seen[-1].message_id if seen else None


# --- proposals and resources ---------------------------------------------------------------


def open_proposal(
    state: WorkflowState,
    *,
    proposal_id: str,
    author: str,
    title: str,
    options: Sequence[str],
    description: str = "",
    voters: Sequence[str] = (),
) -> list[AnyEvent]:
    if proposal_id in state.proposals:
        return []
    choices = tuple(dict.fromkeys(o.strip() for o in options if o.strip()))
    if len(choices) < 2:
        raise WorkflowRejected("a proposal needs at least two distinct options")
    electorate = tuple(voters) or tuple(sorted(state.members))
    unknown = [v for v in electorate if v not in state.members]
    if unknown:
        raise WorkflowRejected(f"voters {', '.join(unknown)} are not members")
    return [
        ProposalOpened(
            proposal_id=proposal_id, title=title, options=choices, author=author,
            voters=electorate, description=description,
        )
    ]  # fmt: skip


def vote(
    state: WorkflowState, *, proposal_id: str, voter: str, choice: str, reason: str = ""
) -> list[AnyEvent]:
    """A vote; the last voter's vote closes the proposal with the tally."""
    proposal = state.proposals.get(proposal_id)
    if proposal is None:
        raise WorkflowRejected(f"no proposal {proposal_id!r}")
    if proposal.closed:
        raise WorkflowRejected(f"proposal {proposal_id!r} is closed: {proposal.outcome or 'tie'}")
    if voter not in proposal.voters:
        raise WorkflowRejected(f"@{voter} is not a voter of proposal {proposal_id!r}")
    if choice not in proposal.options:
        raise WorkflowRejected(
            f"{choice!r} is not an option of proposal {proposal_id!r}: "
            f"{', '.join(proposal.options)}"
        )
    events: list[AnyEvent] = [
        ProposalVoted(proposal_id=proposal_id, voter=voter, choice=choice, reason=reason)
    ]
    votes = {**proposal.votes, voter: choice}
    if set(votes) >= set(proposal.voters):
        tally = dict.fromkeys(proposal.options, 0)
        for c in votes.values():
            tally[c] += 1
        best = max(tally.values())
        winners = [o for o, n in tally.items() if n == best]
        outcome = winners[0] if len(winners) == 1 else ""
        events.append(
            ProposalClosed(
                proposal_id=proposal_id,
                outcome=outcome,
                tally=tally,
                reason="every voter has voted" + ("" if outcome else "; a tie"),
            )
        )
    return events


def store_resource(state: WorkflowState, *, content: str, author: str) -> list[AnyEvent]:
    rid = resource_id(content)
    if rid in state.resources:
        return []
    return [ResourceStored(resource_id=rid, content=content, author=author, size=len(content))]
