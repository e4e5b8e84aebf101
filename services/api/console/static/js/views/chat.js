// The chat tab: the transcript (markdown; each tool call folded with its result, and where
// in the app's code a tool raised), text streaming in live, approvals of held tool calls,
// the message box and the todos.

import {api} from "../api.js";
import {clear, h, json} from "../dom.js";
import {eventsPage} from "../events.js";
import {highlight, markdown} from "../markdown.js";
import {flash} from "../ui.js";

export function showChat(body, ctx) {
  const transcript = h("div.transcript#transcript");
  const hitl = h("div");
  const todos = h("div");
  const input = h("textarea#message", {rows: 3, placeholder: "Message the agent… (Ctrl+Enter sends)"});
  const strategy = h("select#strategy", {title: "while a run is active"},
    h("option", {value: "queue"}, "queue after the active run"),
    h("option", {value: "reject"}, "reject if a run is active"),
    h("option", {value: "interrupt"}, "interrupt the active run"));
  const send = async () => {
    const content = input.value.trim();
    if (!content) return;
    try {
      const r = await api("POST", `${ctx.base}/invoke`, {messages: [{role: "user", content}], strategy: strategy.value});
      input.value = "";
      flash(`run ${r.runId.slice(-8)} ${r.status}`);
    } catch (e) {
      flash(e.message, true);
    }
  };
  input.addEventListener("keydown", (e) => { if (e.key === "Enter" && (e.ctrlKey || e.metaKey)) send(); });
  clear(body, h("div.view",
    h("div.chat", transcript, hitl,
      h("div.composer", input, h("div.row", strategy, h("span.grow"), h("button.primary#send", {onclick: send}, "Send")))),
    h("div.col.side-col", todos, subagents(ctx))));

  let streaming = null;  // {runId, step, node, text}
  const edits = new Map();  // tool call id → the arguments a person approved instead
  const raised = new Map();  // tool call id → where in the app's code the tool raised
  const noteEdits = (event) => {
    for (const call of event.data.modifiedToolCalls || []) edits.set(call.id, call.arguments);
  };
  const noteRaised = (event) => {
    if (event.data.raisedAt) raised.set(event.data.toolCallId, event.data.raisedAt);
  };
  const render = (view) => {
    const atBottom = transcript.scrollHeight - transcript.scrollTop - transcript.clientHeight < 40;
    clear(transcript, messages(view.state.messages, edits, raised), streaming ? streaming.node : null);
    if (!view.state.messages.length && !streaming) transcript.append(h("div.empty", "No messages yet."));
    if (atBottom) transcript.scrollTop = transcript.scrollHeight;
    renderHitl(hitl, ctx, view);
    renderTodos(todos, view.state.todos);
  };
  const onEvent = (event) => {
    if (event.type === "hitl.resume") noteEdits(event);
    if (event.type === "tool.error") noteRaised(event);
    if (event.type === "model.delta") {
      const {runId, step, delta} = event.data;
      if (!streaming || streaming.runId !== runId || streaming.step !== step) {
        streaming = {runId, step, text: "", node: h("div.msg.assistant.streaming")};
        transcript.append(streaming.node);
      }
      streaming.text += delta;
      clear(streaming.node, h("div.who", "assistant · streaming"), markdown(streaming.text));
      transcript.scrollTop = transcript.scrollHeight;
    } else if (event.type === "model.completed" || event.type.startsWith("run.")) {
      if (streaming) streaming.node.remove();
      streaming = null;
    }
  };
  render(ctx.state);
  transcript.scrollTop = transcript.scrollHeight;
  const offState = ctx.onState(render);
  const offEvents = ctx.listen(onEvent);
  eventsPage(ctx.agency, ctx.id, {types: ["hitl.resume", "tool.error"], limit: 1000}).then((page) => {
    for (const event of page.events) (event.type === "tool.error" ? noteRaised : noteEdits)(event);
    if (edits.size || raised.size) render(ctx.state);
  });
  return () => { offState(); offEvents(); };
}

/** Messages with each assistant tool call folded together with its result. */
function messages(list, edits, raised) {
  const results = new Map(list.filter((m) => m.role === "tool").map((m) => [m.toolCallId, m]));
  const shown = [];
  for (const m of list) {
    if (m.role === "tool" && m.toolCallId && list.some((a) => (a.toolCalls || []).some((c) => c.id === m.toolCallId))) continue;
    const node = h(`div.msg.${m.role}`, h("div.who", m.role + (m.name ? ` · ${m.name}` : "")));
    if (m.content) node.append(m.role === "tool" ? h("pre", m.content) : markdown(m.content));
    for (const call of m.toolCalls || []) node.append(toolCall(call, results.get(call.id), edits.get(call.id), raised.get(call.id)));
    shown.push(node);
  }
  return shown;
}

// Calls a person unfolded stay unfolded when the transcript is drawn again.
const unfolded = new Set();

function toolCall(call, result, edited, raisedAt) {
  const args = typeof call.args === "string" ? call.args : json(call.args);
  const brief = typeof call.args === "string" ? call.args : JSON.stringify(call.args);
  const failed = result && /^(\w+Error|Not run|rejected)/i.test(result.content || "");
  return h("details.call", {open: unfolded.has(call.id), "data-call": call.id,
    ontoggle: (e) => { if (e.target.open) unfolded.add(call.id); else unfolded.delete(call.id); }},
  h("summary", h("span.tool", call.name), " ", h("span.muted", brief.length > 90 ? brief.slice(0, 89) + "…" : brief),
      result ? "" : h("span.badge.paused", {style: "margin-left:6px"}, "waiting"),
      edited ? h("span.badge.paused", {style: "margin-left:6px"}, "edited on approval") : ""),
    h("div.inner", highlight(args, "json"),
      edited ? h("div.edited", h("div.who", "approved with these arguments"), highlight(pretty(edited), "json")) : null,
      result ? h(`div.result${failed ? ".error" : ""}`, h("div.who", "result"), h("pre", result.content),
        raisedAt ? h("div.muted.raised-at", "raised at ", h("span.mono", raisedAt)) : null) : null));
}

function pretty(text) {
  try { return json(JSON.parse(text)); } catch { return text; }
}

function renderHitl(box, ctx, view) {
  const pending = view.state.pendingToolCalls || [];
  const atBreakpoint = view.run.status === "paused" && view.run.reason === "breakpoint";
  const held = view.run.status === "paused" && pending.length ? pending.map((c) => c.id).join(",")
    : atBreakpoint ? `breakpoint:${view.run.runId}:${view.run.step}` : "";
  // Rebuilding would throw away what the person is typing: keep the card while the same
  // calls are pending.
  if (box.dataset.held === held) return;
  box.dataset.held = held;
  if (!held) return clear(box);
  if (atBreakpoint) return renderBreakpoint(box, ctx);
  const decisions = new Map(pending.map((c) => [c.id, "approve"]));
  const editors = new Map();
  const error = h("div.err");
  const submit = h("button.primary#hitl-submit", "Submit decision");
  const update = () => {
    const kinds = new Set(decisions.values());
    submit.disabled = kinds.size > 1;
    submit.textContent = kinds.has("reject") ? (pending.length > 1 ? "Reject all" : "Reject") : "Approve";
    error.textContent = kinds.size > 1
      ? "The runtime takes one decision for the calls of a step: approve them all (with your edits) or reject them all."
      : "";
  };
  const cards = pending.map((call) => {
    const editor = h("textarea", {rows: 4, "data-call": call.id}, typeof call.args === "string" ? call.args : json(call.args));
    editors.set(call.id, editor);
    const card = h("div.callbox", h("div.row", h("b.mono", call.name), h("span.muted.mono", call.id), h("span.grow"),
      h("button.small", {"data-action": "approve", onclick: () => choose("approve")}, "Approve"),
      h("button.small.danger", {"data-action": "reject", onclick: () => choose("reject")}, "Reject")),
    h("div.muted", {style: "font-size:12px;margin:4px 0"}, "Arguments (edit before approving):"), editor);
    const choose = (kind) => {
      decisions.set(call.id, kind);
      card.classList.toggle("rejected", kind === "reject");
      update();
    };
    return card;
  });
  submit.onclick = async () => {
    const approved = !new Set(decisions.values()).has("reject");
    const body = {approved};
    if (approved) {
      try {
        body.modifiedToolCalls = pending.map((c) => ({id: c.id, name: c.name, args: JSON.parse(editors.get(c.id).value)}));
      } catch (e) {
        error.textContent = "The arguments are not valid JSON: " + e.message;
        return;
      }
    }
    try {
      await api("POST", `${ctx.base}/approve`, body);
      flash(approved ? "approved" : "rejected");
    } catch (e) {
      error.textContent = e.message;
    }
  };
  update();
  clear(box, h("div.card.hitl#hitl", h("h3", `Approval needed: ${pending.length} tool call${pending.length > 1 ? "s" : ""}`),
    cards, h("div.row", submit, error)));
}

// A run paused at a breakpoint before its model call (LangGraph's interrupt_before=["model"]
// or interrupt_after=["tools"]): no calls to decide on; approving goes on, cancel ends it.
function renderBreakpoint(box, ctx) {
  const error = h("div.err");
  const go = async () => {
    try {
      await api("POST", `${ctx.base}/approve`, {approved: true});
      flash("going on");
    } catch (e) {
      error.textContent = e.message;
    }
  };
  clear(box, h("div.card.hitl#hitl", h("h3", "Paused at a breakpoint before the model call"),
    h("div.row", h("button.primary#breakpoint-go", {onclick: go}, "Go on"), error)));
}

function renderTodos(box, todos) {
  clear(box, h("h2", "Todos"), todos.length
    ? h("ul.todos", todos.map((t) => h("li", h("span.st", t.status.replace("_", " ")), h(`span.${t.status}`, t.content))))
    : h("div.muted", "No todos."));
}

function subagents(ctx) {
  const box = h("div");
  const render = (view) => {
    const links = view.state.subagents || [];
    clear(box, h("h2", "Subagents"), links.length
      ? links.map((l) => h("div", {style: "margin-bottom:6px"},
        h("a", {href: `#/a/${ctx.agency}/t/${l.childThreadId}`}, `${l.subagentType} …${l.childThreadId.slice(-8)}`),
        " ", h(`span.badge.${l.status}`, l.status),
        l.report ? h("div.muted", {style: "font-size:12px"}, l.report.slice(0, 140)) : null))
      : h("div.muted", "None."));
  };
  render(ctx.state);
  ctx.onState(render);
  return box;
}
