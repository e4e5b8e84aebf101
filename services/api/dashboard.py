"""`GET /`: a one-page dashboard over the public API, with no external assets.

The page keeps the API key in the browser's localStorage and calls the same routes any
client would. Live events come from the SSE stream; `EventSource` cannot send headers, so
it passes the key as `?access_token=`, which only the stream route accepts.
"""

from __future__ import annotations

import functools
import json

from litestar import MediaType, get
from litestar.response import Response

from contracts.codec import EVENT_TYPES
from services.api.auth import PUBLIC_OPT

_PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>Agency</title>
<style>
body{font:14px system-ui,sans-serif;margin:0;display:grid;grid-template-columns:260px 1fr;
  height:100vh;color:#222}
aside{background:#f4f4f6;padding:12px;overflow:auto;border-right:1px solid #ddd}
main{display:grid;grid-template-columns:1fr 340px;overflow:hidden}
section{padding:12px;overflow:auto}
h2{font-size:13px;text-transform:uppercase;color:#666;margin:16px 0 6px}
input,select,textarea,button{font:inherit;width:100%;box-sizing:border-box;margin:2px 0}
button{cursor:pointer}
.thread{padding:4px 6px;border-radius:4px;cursor:pointer;font-family:monospace;font-size:12px}
.thread.sel{background:#dde4ff}
.msg{margin:6px 0;padding:6px 8px;border-radius:6px;background:#f6f6f6;white-space:pre-wrap}
.msg.user{background:#e7f0ff}.msg.tool{background:#f3f0e6;font-family:monospace;font-size:12px}
.ev{font-family:monospace;font-size:12px;border-bottom:1px solid #eee;padding:2px 0}
.ev b{display:inline-block;min-width:3em}
.pending{border:1px solid #e0a000;padding:8px;border-radius:6px;margin:8px 0}
pre{white-space:pre-wrap;font-size:12px;background:#fafafa;padding:6px}
#status{font-weight:bold}#error{color:#b00020}
</style></head><body>
<aside>
  <h2>API key</h2>
  <input id="key" type="password" placeholder="ak_..." autocomplete="off">
  <button id="save">Use this key</button>
  <div id="error"></div>
  <h2>Agency</h2>
  <select id="agencies"></select>
  <input id="agencyName" placeholder="new agency name"><button id="newAgency">Create agency</button>
  <h2>Threads</h2>
  <div id="threads"></div>
  <select id="agentTypes"></select><button id="newThread">New thread</button>
</aside>
<main>
  <section>
    <div>Run: <span id="status">-</span></div>
    <div id="pending"></div>
    <div id="messages"></div>
    <textarea id="input" rows="3" placeholder="Message"></textarea>
    <button id="send">Send</button>
    <h2>Todos</h2><ul id="todos"></ul>
    <h2>Files</h2><div id="files"></div>
  </section>
  <section><h2>Events</h2><div id="events"></div></section>
</main>
<script>
"use strict";
const EVENT_TYPES = __EVENT_TYPES__;
const $ = (id) => document.getElementById(id);
let agency = null, thread = null, source = null, lastSeq = 0, refreshTimer = null;

function el(tag, cls, text) {
  const node = document.createElement(tag);
  if (cls) node.className = cls;
  if (text !== undefined) node.textContent = text;
  return node;
}
async function api(method, path, body) {
  const headers = {"Authorization": "Bearer " + localStorage.getItem("agency.key")};
  if (body !== undefined) headers["Content-Type"] = "application/json";
  const init = {method, headers};
  if (body !== undefined) init.body = JSON.stringify(body);
  const r = await fetch(path, init);
  const data = r.headers.get("content-type")?.includes("json") ? await r.json() : null;
  if (!r.ok) {
    $("error").textContent = (data && data.error) || r.statusText;
    throw new Error(String(r.status));
  }
  $("error").textContent = "";
  return data;
}
async function loadAgencies() {
  const list = await api("GET", "/agencies");
  $("agencies").replaceChildren(...list.map((a) => {
    const o = el("option", "", a.name + " (" + a.id + ")"); o.value = a.id; return o; }));
  if (!list.length) return;
  agency = agency || list[0].id;
  $("agencies").value = agency;
  await loadAgency();
}
async function loadAgency() {
  agency = $("agencies").value;
  const [threads, blueprints] = await Promise.all([
    api("GET", `/agency/${agency}/agents`), api("GET", `/agency/${agency}/blueprints`)]);
  $("agentTypes").replaceChildren(...blueprints.map((b) => el("option", "", b.name)));
  $("threads").replaceChildren(...threads.map((t) => {
    const label = `${t.agentType} …${t.id.slice(-8)} ${t.status}`;
    const d = el("div", "thread" + (t.id === thread ? " sel" : ""), label);
    d.onclick = () => openThread(t.id); return d; }));
}
function base() { return `/agency/${agency}/agent/${thread}`; }
async function openThread(id) {
  thread = id; lastSeq = 0; $("events").replaceChildren();
  if (source) source.close();
  await loadAgency(); await refresh();
  // EventSource cannot send an Authorization header: the stream route takes access_token.
  const key = encodeURIComponent(localStorage.getItem("agency.key"));
  source = new EventSource(`${base()}/stream?fromSeq=1&access_token=${key}`);
  for (const type of EVENT_TYPES) source.addEventListener(type, onEvent);
}
function onEvent(e) {
  const seq = Number(e.lastEventId);
  if (seq <= lastSeq) return;  // a reconnect may repeat what we have
  lastSeq = seq;
  const env = JSON.parse(e.data), row = el("div", "ev");
  const payload = JSON.stringify(env.payload).slice(0, 160);
  row.append(el("b", "", String(seq)), ` ${e.type} `, el("span", "", payload));
  $("events").prepend(row);
  clearTimeout(refreshTimer); refreshTimer = setTimeout(refresh, 300);
}
async function refresh() {
  if (!thread) return;
  const {state, run} = await api("GET", `${base()}/state`);
  const reason = run.reason ? ` (${run.reason})` : "";
  $("status").textContent = `${run.status}${reason} ${run.runId || ""}`;
  $("messages").replaceChildren(...state.messages.map((m) => {
    const calls = (m.toolCalls || []).map((c) => `\\n→ ${c.name} ${JSON.stringify(c.args)}`);
    return el("div", "msg " + m.role, `${m.role}: ${m.content || ""}${calls.join("")}`);
  }));
  $("todos").replaceChildren(...state.todos.map((t) => el("li", "", `[${t.status}] ${t.content}`)));
  $("files").replaceChildren(...Object.entries(state.files).map(([path, text]) => {
    const d = el("details"); d.append(el("summary", "", path), el("pre", "", text)); return d; }));
  const pending = state.pendingToolCalls || [];
  $("pending").replaceChildren();
  if (run.status === "paused" && pending.length) {
    const box = el("div", "pending", "Approval needed:");
    for (const c of pending) {
      box.append(el("pre", "", `${c.name} ${JSON.stringify(c.args, null, 2)}`));
    }
    const yes = el("button", "", "Approve"), no = el("button", "", "Reject");
    yes.onclick = () => api("POST", `${base()}/approve`, {approved: true}).then(refresh);
    no.onclick = () => api("POST", `${base()}/approve`, {approved: false}).then(refresh);
    box.append(yes, no); $("pending").append(box);
  }
}
$("save").onclick = () => {
  localStorage.setItem("agency.key", $("key").value.trim());
  loadAgencies();
};
$("agencies").onchange = () => { thread = null; loadAgency(); };
$("newAgency").onclick = async () => {
  const a = await api("POST", "/agencies", {name: $("agencyName").value || "agency"});
  agency = a.id; await loadAgencies(); };
$("newThread").onclick = async () => {
  const t = await api("POST", `/agency/${agency}/agents`, {agentType: $("agentTypes").value});
  await openThread(t.id); };
$("send").onclick = async () => {
  const content = $("input").value.trim();
  if (!thread || !content) return;
  await api("POST", `${base()}/invoke`, {messages: [{role: "user", content}]});
  $("input").value = ""; };
// `agency up` prints a link carrying the key in the fragment, which never reaches a server.
const fragment = new URLSearchParams(location.hash.slice(1));
if (fragment.get("key")) {
  localStorage.setItem("agency.key", fragment.get("key"));
  history.replaceState(null, "", location.pathname + location.search);
}
const params = new URLSearchParams(location.search);
if (localStorage.getItem("agency.key")) {
  $("key").value = localStorage.getItem("agency.key");
  loadAgencies().then(async () => {
    if (params.get("agency")) { agency = params.get("agency"); await loadAgencies(); }
    if (params.get("thread")) await openThread(params.get("thread"));
  });
}
</script></body></html>
"""


@functools.cache
def page() -> str:
    return _PAGE.replace("__EVENT_TYPES__", json.dumps(sorted(EVENT_TYPES)))


@get("/", opt={PUBLIC_OPT: True}, include_in_schema=False, media_type=MediaType.HTML)
async def dashboard() -> Response[str]:
    return Response(page(), media_type=MediaType.HTML)
