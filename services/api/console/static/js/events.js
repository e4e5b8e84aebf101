// Events as the console sees them. `toConsoleEvent` is the one place that knows the wire
// shape of an event: everything else reads {threadId, runId, seq, streamSeq, ts, type,
// data, eventId, correlationId} with `data` in camelCase.

import {ROOT, api, apiKey, paths} from "./api.js";

// Keys whose values are maps of the user's own keys (file paths, metadata): kept as they are.
const OPAQUE = new Set(["files", "metadata", "request", "config", "args"]);
const camel = (key) => key.replace(/_([a-z0-9])/g, (_, c) => c.toUpperCase());

function camelKeys(value) {
  if (Array.isArray(value)) return value.map(camelKeys);
  if (!value || typeof value !== "object") return value;
  const out = {};
  for (const [key, inner] of Object.entries(value)) {
    out[camel(key)] = OPAQUE.has(key) ? inner : camelKeys(inner);
  }
  return out;
}

/** A wire event (the HTTP event view, or a raw envelope) → the console's event. */
export function toConsoleEvent(wire) {
  if (wire.payload === undefined) return wire;  // already the camelCase event view
  return {
    threadId: wire.thread_id || wire.aggregate_id,
    runId: wire.run_id,
    seq: wire.seq,
    streamSeq: wire.stream_seq,
    ts: wire.ts,
    type: wire.type,
    data: camelKeys(wire.payload),
    eventId: wire.event_id,
    correlationId: wire.correlation_id,
    causationId: wire.causation_id,
    agencyId: wire.agency_id,
  };
}

/** One page of a thread's (or, with correlationId, its tree's) stored events. */
export async function eventsPage(agency, thread, {fromSeq = 1, limit = 500, types, correlationId} = {}) {
  const page = await api("GET", `${paths.thread(agency, thread)}/events`, undefined,
    {fromSeq, limit, type: types, correlationId});
  const events = page.events.map(toConsoleEvent);
  const last = events[events.length - 1];
  // A tree pages by stream sequence, a thread by its own sequence.
  const next = last ? (correlationId ? last.streamSeq : last.seq) + 1 : fromSeq;
  return {events, hasMore: page.hasMore, next};
}

/** Every stored event (up to maxPages of 1000), in order. */
export async function allEvents(agency, thread, query = {}, maxPages = 20) {
  const out = [];
  let from = 1;
  for (let i = 0; i < maxPages; i++) {
    const page = await eventsPage(agency, thread, {...query, fromSeq: from, limit: 1000});
    out.push(...page.events);
    if (!page.hasMore || !page.events.length) break;
    from = page.next;
  }
  return out;
}

/**
 * A thread's live events over SSE, from `afterSeq` on. EventSource reconnects by itself
 * with Last-Event-ID; when it gives up (an HTTP error), the feed reconnects from the last
 * seq it delivered. Events are delivered once, in order: anything at or below the last
 * delivered seq is dropped.
 */
export class EventFeed {
  constructor(agency, thread, afterSeq, onEvent, onStatus = () => {}) {
    this.url = `${paths.thread(agency, thread)}/stream`;
    this.lastSeq = afterSeq;
    this.onEvent = onEvent;
    this.onStatus = onStatus;
    this.closed = false;
    this.retry = 500;
    this.delivered = [];  // every seq handed on, in order (what a test checks for gaps)
    this.open();
  }

  open() {
    if (this.closed) return;
    const key = encodeURIComponent(apiKey());
    const source = new EventSource(`${ROOT}${this.url}?fromSeq=${this.lastSeq + 1}&access_token=${key}`);
    this.source = source;
    // One unnamed frame an event: every event reaches onmessage, once.
    source.onmessage = (message) => this.receive(message);
    source.onopen = () => { this.retry = 500; this.onStatus("live"); };
    source.onerror = () => {
      if (source.readyState === EventSource.CLOSED) {
        this.onStatus("offline");
        setTimeout(() => this.open(), this.retry);
        this.retry = Math.min(this.retry * 2, 10000);
      } else {
        this.onStatus("reconnecting");
      }
    };
  }

  receive(message) {
    const event = toConsoleEvent(JSON.parse(message.data));
    if (event.seq <= this.lastSeq) return;
    this.lastSeq = event.seq;
    this.delivered.push(event.seq);
    this.onEvent(event);
  }

  /** Drop the connection as a network failure would (EventSource then resumes by itself). */
  reconnect() {
    this.source.close();
    this.onStatus("reconnecting");
    this.open();
  }

  close() {
    this.closed = true;
    if (this.source) this.source.close();
  }
}

export function family(type) {
  return type.split(".")[0];
}

const clip = (text, n = 160) => {
  const s = String(text ?? "").replace(/\s+/g, " ").trim();
  return s.length > n ? s.slice(0, n - 1) + "…" : s;
};

function calls(list) {
  return (list || []).map((c) => `${c.name}(${clip(c.arguments ?? JSON.stringify(c.args), 80)})`).join(", ");
}

/** One line of what an event says, for timeline rows and graph labels. */
export function summarize(event) {
  const d = event.data || {};
  switch (event.type) {
    case "thread.created": return `${d.agentType}${d.parent ? " (subagent of " + d.parent.threadId.slice(-8) + ")" : ""}`;
    case "request.accepted": return clip((d.messages || []).map((m) => m.content).join(" ")) || d.strategy;
    case "request.rejected": return d.reason;
    case "message.appended": return `${d.message.role}: ${clip(d.message.content) || calls(d.message.toolCalls)}`;
    case "model.started": return `step ${d.step} · ${d.model}`;
    case "model.delta": return clip(d.delta);
    case "model.completed": {
      const u = d.usage || {};
      const what = clip(d.message.content, 100) || calls(d.message.toolCalls);
      return `${what} · ${u.inputTokens ?? 0}→${u.outputTokens ?? 0} tok`;
    }
    case "tool.requested": return calls([d.call]);
    case "tool.started": return `${d.toolName}(${clip(d.arguments, 100)})`;
    case "tool.output": return `${d.toolName} → ${clip(d.output)}`;
    case "tool.error": return `${d.toolName} ✗ ${clip(d.error)}${d.raisedAt ? ` · raised at ${d.raisedAt}` : ""}`;
    case "hitl.interrupt": return "approval needed: " + calls(d.proposedToolCalls);
    case "hitl.resume": return d.approved ? "approved" + (d.modifiedToolCalls ? " with edits" : "") : "rejected";
    case "subagent.requested": return `${d.subagentType}: ${clip(d.description, 100)}`;
    case "subagent.spawned": return `${d.subagentType} → ${d.childThreadId}`;
    case "subagent.completed": return `${d.outcome}: ${clip(d.report, 100)}`;
    case "subagent.env_required": return `${d.subagentType} needs ${(d.missing || []).join(", ")} (request ${d.requestId})`;
    case "subagent.variables_provided": return `${(d.names || []).join(", ")} provided (request ${d.requestId})`;
    case "run.tick": return `step ${d.step}`;
    case "run.started": return `${d.agentType}, at most ${d.maxSteps} steps`;
    case "run.resumed": return "";
    case "agent.started": return `${d.agentType} · ${d.model}`;
    case "agent.completed": return clip(d.result, 100);
    case "run.paused": case "run.canceled": case "run.error": return d.reason || d.error || "";
    case "run.completed": return clip(d.result, 100);
    case "todos.written": return (d.todos || []).map((t) => `[${t.status}] ${t.content}`).join("; ");
    case "file.written": return `${d.path} (${(d.content || "").length} chars)`;
    case "middleware.before_model": case "middleware.after_model": return d.middlewareName;
    default: return clip(JSON.stringify(d), 160);
  }
}
