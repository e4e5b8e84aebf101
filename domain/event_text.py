"""One human-readable line per event: what a person debugging a run wants to see."""

from __future__ import annotations

from agency.contracts.events import (
    AgencyCreated,
    AgentError,
    AgentStateSet,
    BlueprintSaved,
    ChannelMessagePosted,
    ChatMessage,
    CheckpointSaved,
    DocumentWritten,
    Event,
    FileWritten,
    HitlInterrupt,
    HitlResume,
    MemberAdded,
    MemberAnswered,
    MemberInvoked,
    MemberSkipped,
    MessageAppended,
    ModelCompleted,
    ModelDelta,
    ModelStarted,
    ProposalClosed,
    ProposalOpened,
    ProposalVoted,
    ReplyAction,
    ReplyDelta,
    ReplyThinking,
    RequestAccepted,
    ResourceStored,
    RunCanceled,
    RunCompleted,
    RunDelayed,
    RunError,
    RunPaused,
    RunStarted,
    RunTick,
    StateRestored,
    StateUpdated,
    StoreItemDeleted,
    StoreItemPut,
    SubagentCompleted,
    SubagentEnvRequired,
    SubagentSpawned,
    SubagentVariablesProvided,
    ThreadCreated,
    ThreadMetadataSet,
    TodosWritten,
    ToolError,
    ToolOutput,
    ToolRegistered,
    ToolRequested,
    ToolStarted,
    WorkflowCreated,
    WorkflowStarted,
    WorkflowStopped,
)
from agency.contracts.records import RecordedEvent

_WIDTH = 100


def clip(text: str, width: int = _WIDTH) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= width else flat[: width - 1] + "…"


def _message(m: ChatMessage) -> str:
    if m.tool_calls:
        calls = ", ".join(f"{c.name}({clip(c.arguments, 40)})" for c in m.tool_calls)
        return f"{m.role}: {clip(m.content, 40) + ' ' if m.content else ''}→ {calls}"
    if m.role == "tool":
        return f"tool[{m.tool_call_id}]: {clip(m.content)}"
    return f"{m.role}: {clip(m.content)}"


def summarize(payload: Event) -> str:
    match payload:
        case ThreadCreated(agent_type=agent_type, parent=parent):
            return f"agent {agent_type}" + (f", child of {parent.thread_id}" if parent else "")
        case RequestAccepted(run_id=run_id, strategy=strategy):
            return f"run {run_id} ({strategy})"
        case MessageAppended(message=message):
            return _message(message)
        case RunStarted(run_id=run_id, agent_type=agent_type):
            return f"run {run_id} agent {agent_type}"
        case RunDelayed(run_id=run_id, not_before=due):
            return f"run {run_id} from {due.isoformat(timespec='seconds')}"
        case RunTick(step=step):
            return f"step {step}"
        case RunPaused(reason=reason):
            return f"paused: {reason}"
        case RunCompleted(result=result):
            return f"completed: {clip(result)}"
        case RunError(error=error):
            return f"error: {clip(error)}"
        case RunCanceled(reason=reason):
            return f"canceled{': ' + reason if reason else ''}"
        case AgentError(error=error):
            return clip(error)
        case ModelStarted(model=model, step=step):
            return f"{model} step {step}"
        case ModelDelta(delta=delta):
            return clip(delta)
        case ModelCompleted(message=message, usage=usage):
            return f"{_message(message)} [{usage.input_tokens}→{usage.output_tokens} tokens]"
        case ToolRequested(call=call):
            return f"{call.name}({clip(call.arguments, 60)}) id={call.id}"
        case ToolStarted(tool_name=name, attempt=attempt):
            return f"{name} attempt {attempt}"
        case ToolOutput(tool_name=name, output=output):
            return f"{name} → {clip(output)}"
        case ToolError(tool_name=name, error=error):
            return f"{name} failed: {clip(error)}"
        case CheckpointSaved(state_hash=state_hash, size=size, upto_seq=upto_seq):
            return f"{state_hash[:19]}… ({size} bytes) up to #{upto_seq}"
        case ToolRegistered(name=name, kind=kind, middleware=middleware):
            return f"{name} ({kind}) by {middleware}"
        case HitlInterrupt(proposed_tool_calls=calls):
            return "approval needed for " + ", ".join(c.name for c in calls)
        case HitlResume(approved=approved, modified_tool_calls=modified):
            verdict = "approved" if approved else "rejected"
            return verdict + (" with modified calls" if modified else "")
        case SubagentSpawned(child_thread_id=child, subagent_type=kind):
            return f"{kind} → thread {child}"
        case SubagentCompleted(child_thread_id=child, outcome=outcome, report=report):
            return f"thread {child} {outcome}: {clip(report)}"
        case SubagentEnvRequired(subagent_type=kind, request_id=request, missing=missing):
            return f"{kind} needs {', '.join(missing)} (request {request})"
        case SubagentVariablesProvided(request_id=request, names=names):
            return f"{', '.join(names)} provided (request {request})"
        case FileWritten(path=path, content=content):
            return f"{path} ({len(content)} chars)"
        case TodosWritten(todos=todos):
            return ", ".join(f"[{t.status}] {t.content}" for t in todos)
        case AgencyCreated(name=name):
            return name
        case BlueprintSaved(blueprint=bp, revision=revision):
            return f"{bp.name} rev {revision}"
        case ThreadMetadataSet(metadata=metadata):
            return clip(", ".join(f"{k}={v}" for k, v in metadata.items()))
        case StateUpdated(as_node=node):
            return f"as {node}"
        case StateRestored(from_seq=seq, messages=messages):
            return f"as at event {seq} ({len(messages)} messages)"
        case StoreItemPut(namespace=ns, key=key) | StoreItemDeleted(namespace=ns, key=key):
            return clip("/".join((*ns, key)))
    return _code_agent(payload) or _workflow(payload)


def _code_agent(payload: Event) -> str:
    match payload:
        case ReplyDelta(text=text) | ReplyThinking(text=text):
            return clip(text)
        case ReplyAction(name=name, arguments=arguments):
            return f"{name}({clip(arguments, 60)})"
        case AgentStateSet(value=value):
            return clip(repr(value))
    return ""


def _workflow(payload: Event) -> str:
    match payload:
        case WorkflowCreated(name=name, tag=tag):
            return f"@{name}" + (f":{tag}" if tag else "")
        case MemberAdded(member=member, agent_type=agent_type, thread_id=thread):
            return f"@{member} agent {agent_type} thread {thread}"
        case WorkflowStarted(run_id=run_id):
            return f"run {run_id}"
        case WorkflowStopped(reason=reason):
            return f"stopped{': ' + clip(reason) if reason else ''}"
        case ChannelMessagePosted(sender=sender, content=content, hop=hop):
            return f"hop {hop} [@{sender}] {clip(content)}"
        case MemberInvoked(member=member, run_id=run_id, attempt=attempt):
            return f"@{member} run {run_id}" + (f" attempt {attempt}" if attempt > 1 else "")
        case MemberAnswered(member=member, outcome=outcome, error=error, retrying=retrying):
            retry = ", retrying" if retrying else ""
            return f"@{member} {outcome}{': ' + clip(error) if error else ''}{retry}"
        case MemberSkipped(member=member, reason=reason):
            return f"@{member}: {clip(reason)}"
        case DocumentWritten(path=path, content=content, author=author):
            return f"{path} ({len(content)} chars) by @{author}"
        case ResourceStored(resource_id=resource, size=size, author=author):
            return f"{resource} ({size} bytes) by @{author}"
        case ProposalOpened(proposal_id=proposal, title=title, options=options):
            return f"{proposal} {clip(title, 40)}: {' / '.join(options)}"
        case ProposalVoted(proposal_id=proposal, voter=voter, choice=choice):
            return f"{proposal} @{voter} → {choice}"
        case ProposalClosed(proposal_id=proposal, outcome=outcome):
            return f"{proposal} → {outcome}"
    return ""


def format_line(event: RecordedEvent) -> str:
    env = event.envelope
    ts = env.ts.strftime("%H:%M:%S.%f")[:-3]
    where = f"{env.aggregate}/{env.aggregate_id}#{env.seq}"
    summary = summarize(env.payload)
    return f"{event.stream_seq:>8} {ts} {where:<40} {env.type:<22} {summary}".rstrip()
