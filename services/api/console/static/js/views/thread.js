// One thread: its header (status, run, step, cancel, live) and tabs. The thread's live
// feed is opened here once and shared by the tabs through `ctx.listen`.

import {api, paths} from "../api.js";
import {badge, clear, debounce, h, json, shortId} from "../dom.js";
import {EventFeed} from "../events.js";
import {highlight} from "../markdown.js";
import {flash} from "../ui.js";
import {showChat} from "./chat.js";
import {showFiles} from "./files.js";
import {showGraph} from "./graph.js";
import {showReplay} from "./replay.js";
import {showSettings} from "./settings.js";
import {showTimeline} from "./timeline.js";
import {showThreadUsage} from "./usage.js";

const TABS = [["chat", "Chat"], ["timeline", "Timeline"], ["graph", "Graph"], ["files", "Files"],
  ["state", "State"], ["replay", "Replay"], ["usage", "Usage"]];
// A code agent's thread also has its agent's settings.
const CODE_TABS = [...TABS, ["settings", "Settings"]];

/** Whether the thread's agent type is a code agent (its blueprint may be gone: then not). */
async function isCodeAgent(agency, agentType) {
  try {
    const blueprint = await api("GET", `${paths.agency(agency)}/blueprints/${encodeURIComponent(agentType)}`);
    return blueprint.kind === "code";
  } catch {
    return false;
  }
}

/** Retry while the read models have not applied a thread created a moment ago (a fork). */
async function threadOf(agency, id) {
  for (let i = 0; ; i++) {
    try {
      return await api("GET", paths.thread(agency, id));
    } catch (e) {
      if (e.status !== 404 || i >= 20) throw e;
      await new Promise((r) => setTimeout(r, 250));
    }
  }
}

export async function showThread(main, agency, id, tab) {
  const thread = await threadOf(agency, id);
  const tabs = (await isCodeAgent(agency, thread.agentType)) ? CODE_TABS : TABS;
  const ctx = {
    agency, id, thread, base: paths.thread(agency, id), state: null, runs: [],
    listeners: new Set(), stateListeners: new Set(),
    listen(fn) { this.listeners.add(fn); return () => this.listeners.delete(fn); },
    onState(fn) { this.stateListeners.add(fn); return () => this.stateListeners.delete(fn); },
  };
  const status = h("span");
  const live = badge("offline", "offline");
  const head = h("div.thead");
  const body = h("div", {style: "flex:1;display:flex;flex-direction:column;min-height:0"});
  main.className = "fill";
  clear(main, head, h("nav.tabs", tabs.map(([key, label]) => h("a", {
    href: `#/a/${agency}/t/${id}/${key}`, class: key === tab ? "on" : "", "data-tab": key,
  }, label))), body);

  // The read models follow the log a moment behind the stream: read again until they
  // have the last event streamed, and once more when the stream has settled.
  let behind = 0;
  ctx.refresh = async () => {
    try {
      const [state, runs, view] = await Promise.all([api("GET", `${ctx.base}/state`),
        api("GET", `${ctx.base}/runs`), api("GET", ctx.base)]);
      ctx.state = state;
      ctx.runs = runs;
      ctx.view = view;
      header();
      for (const fn of ctx.stateListeners) fn(state);
      window.dispatchEvent(new CustomEvent("agency:thread-changed", {detail: id}));
      if (ctx.feed && view.lastSeq < ctx.feed.lastSeq && behind++ < 40) setTimeout(ctx.refresh, 250);
      else behind = 0;
    } catch (e) {
      flash(e.message, true);
    }
  };
  const refreshSoon = debounce(ctx.refresh, 200);
  const settle = debounce(ctx.refresh, 1500);

  function header() {
    const {state, run} = ctx.state;
    const last = ctx.runs.find((r) => r.runId === run.runId) || ctx.runs[ctx.runs.length - 1];
    const parent = state.parent;
    clear(status,
      badge(run.status, run.status + (run.reason ? ` · ${run.reason}` : "")),
      run.runId ? h("span.mono.muted", ` run ${shortId(run.runId)} · step ${run.step}${last ? "/" + last.maxSteps : ""}`) : null);
    const active = ["running", "paused"].includes(run.status);
    const terminated = ctx.view && ctx.view.status === "terminated";
    clear(head,
      h("span.title", state.agentType),
      h("span.tid", {title: "thread id"}, id),
      parent ? h("a", {href: `#/a/${agency}/t/${parent.threadId}`}, "↑ parent " + shortId(parent.threadId)) : null,
      status, h("span.spacer"), live,
      h("button.danger#cancel", {disabled: !active, onclick: cancel}, "Cancel run"),
      h("button.danger#terminate", {disabled: terminated, onclick: terminate,
        title: "shut the thread down for good: its run ends canceled, later messages are refused"},
        terminated ? "Terminated" : "Terminate"));
  }

  async function terminate() {
    if (!window.confirm("Terminate this thread? Its active run ends and it refuses every later message.")) return;
    try {
      await api("POST", `${ctx.base}/terminate`, {reason: "terminated from the console"});
      flash("terminate sent");
      ctx.refresh();
    } catch (e) {
      flash(e.message, true);
    }
  }

  async function cancel() {
    try {
      await api("POST", `${ctx.base}/cancel`, {reason: "canceled from the console"});
      flash("cancel sent");
    } catch (e) {
      flash(e.message, true);
    }
  }

  ctx.feed = new EventFeed(agency, id, thread.lastSeq, (event) => {
    for (const fn of ctx.listeners) fn(event);
    if (event.type !== "model.delta") { refreshSoon(); settle(); }
  }, (s) => { live.className = `badge ${s === "live" ? "live" : "offline"}`; live.textContent = s; });
  window.agencyFeed = ctx.feed;  // for tests and the curious: `agencyFeed.reconnect()`

  await ctx.refresh();
  const views = {chat: showChat, timeline: showTimeline, graph: showGraph, files: showFiles,
    state: showState, replay: showReplay, usage: showThreadUsage,
    settings: tabs === CODE_TABS ? showSettings : null};
  const leaveTab = await (views[tab] || showChat)(body, ctx);
  return () => {
    ctx.feed.close();
    if (typeof leaveTab === "function") leaveTab();
  };
}

function showState(body, ctx) {
  const pre = h("div.json");
  const render = (state) => clear(pre, highlight(json(state), "json"));
  render(ctx.state);
  clear(body, h("div", {style: "overflow:auto;padding:12px 0"},
    h("p.muted", "What GET …/state answers: the read models' view of the thread."), pre));
  return ctx.onState(render);
}
