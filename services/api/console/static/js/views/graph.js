// The graph tab: the run as a graph across the thread's tree. One lane per thread; along
// it, in the order the log recorded them, runs, steps, model calls, tool calls, approvals
// and ends; dashed edges where a subagent is spawned and where it reports back.

import cytoscape from "../../vendor/cytoscape/cytoscape.esm.min.js";
import {clear, download, h, json, shortId} from "../dom.js";
import {allEvents, summarize} from "../events.js";
import {highlight} from "../markdown.js";
import {toSvg} from "../svg_export.js";
import {forkAt} from "./timeline.js";

const GAP = 28;
const labelWidth = (label) => Math.max(56, label.length * 6.6 + 18);
const ROW = 46;
const COLORS = {thread: "#343a40", run: "#1971c2", step: "#868e96", model: "#7048e8", tool: "#e8590c",
  toolerr: "#c92a2a", hitl: "#f59f00", subagent: "#0c8599", report: "#0c8599", ok: "#2b8a3e", bad: "#c92a2a"};
// Nodes on a thread's spine, left to right; the others hang below their step, top down.
const SPINE = new Set(["thread", "run", "step", "report", "ok", "bad"]);

/**
 * Nodes and edges of a tree's events (in stream order). Each thread is a lane; a lane's
 * spine runs thread → run → step → … → end, and under each step hang its model call, then
 * the tool calls and approvals of that step. Columns follow the order of the log, so a
 * child's lane fills the columns where its parent waited for it.
 */
export function graphOf(events, rootId) {
  const lanes = new Map();  // thread id → lane
  const nodes = [];
  const edges = [];
  const byCall = new Map();  // tool call id → node id
  const spawnOf = new Map();  // child thread id → parent's tool node id
  const reports = [];
  let column = 0;
  const lane = (id) => {
    if (!lanes.has(id)) lanes.set(id, {index: lanes.size, spine: null, hang: null, row: 0, rows: 1, first: null, end: null});
    return lanes.get(id);
  };
  const add = (e, kind, label) => {
    const l = lane(e.threadId);
    const id = `n${nodes.length}`;
    const node = {data: {id, kind, label, color: COLORS[kind], event: e}, col: 0, row: 0, lane: l};
    if (SPINE.has(kind) || !l.spine) {
      node.col = column++;
      if (l.spine) edges.push({data: {id: `s${id}`, source: l.spine.data.id, target: id, kind: "flow"}});
      l.spine = node;
      l.hang = node;
      l.row = 0;
    } else {
      node.col = l.spine.col;
      node.row = ++l.row;
      l.rows = Math.max(l.rows, l.row + 1);
      edges.push({data: {id: `s${id}`, source: l.hang.data.id, target: id, kind: "flow"}});
      l.hang = node;
    }
    nodes.push(node);
    if (!l.first) l.first = id;
    return id;
  };
  for (const e of events) {
    const d = e.data || {};
    switch (e.type) {
      case "thread.created": add(e, "thread", `${d.agentType} ${shortId(e.threadId)}`); break;
      case "run.started": add(e, "run", "run ▶"); break;
      case "run.tick": add(e, "step", `step ${d.step}`); break;
      case "model.completed": {
        const calls = (d.message.toolCalls || []).length;
        const out = d.usage ? d.usage.outputTokens : 0;
        add(e, "model", calls ? `model · ${out} tok` : `answer · ${out} tok`);
        break;
      }
      case "tool.started": case "tool.requested": case "subagent.requested": {
        const call = d.toolCallId || (d.call && d.call.id);
        if (byCall.has(call)) break;
        const name = d.toolName || (d.call && d.call.name) || `task → ${d.subagentType}`;
        byCall.set(call, add(e, e.type === "subagent.requested" ? "subagent" : "tool", name));
        break;
      }
      case "tool.error": {
        const node = nodes.find((n) => n.data.id === byCall.get(d.toolCallId));
        if (node) Object.assign(node.data, {kind: "toolerr", color: COLORS.toolerr});
        break;
      }
      case "hitl.interrupt": add(e, "hitl", "approval?"); break;
      case "hitl.resume": add(e, "hitl", d.approved ? (d.modifiedToolCalls ? "approved, edited" : "approved") : "rejected"); break;
      case "subagent.spawned": spawnOf.set(d.childThreadId, byCall.get(d.toolCallId)); break;
      case "subagent.completed": reports.push([d.childThreadId, add(e, "report", `report ← ${d.outcome}`)]); break;
      case "run.completed": lane(e.threadId).end = add(e, "ok", "completed"); break;
      case "run.error": lane(e.threadId).end = add(e, "bad", "error"); break;
      case "run.canceled": lane(e.threadId).end = add(e, "bad", "canceled"); break;
      default: break;
    }
  }
  for (const [child, from] of spawnOf) {
    const l = lanes.get(child);
    if (from && l && l.first) edges.push({data: {id: `sp${child}`, source: from, target: l.first, kind: "spawn", label: "spawn"}});
  }
  for (const [child, to] of reports) {
    const l = lanes.get(child);
    if (l && l.end) edges.push({data: {id: `rp${child}${to}`, source: l.end, target: to, kind: "report", label: "report"}});
  }
  // Lanes top to bottom, each as tall as its deepest step.
  let top = 0;
  for (const l of lanes.values()) {
    l.top = top;
    top += l.rows * ROW + 50;
  }
  // Each column as wide as its widest node, so short spine nodes take little room.
  const widths = new Array(column).fill(0);
  for (const n of nodes) widths[n.col] = Math.max(widths[n.col], labelWidth(n.data.label));
  const xs = [];
  let x = 0;
  for (let c = 0; c < column; c++) {
    xs.push(x + widths[c] / 2);
    x += widths[c] + GAP;
  }
  const placed = nodes.map((n) => ({data: n.data, position: {x: xs[n.col], y: n.lane.top + n.row * ROW}}));
  return {nodes: placed, edges, lanes: lanes.size, rootId};
}

const STYLE = [
  {selector: "node", style: {
    "label": "data(label)", "background-color": "data(color)", "color": "#fff", "font-size": 11,
    "text-valign": "center", "text-halign": "center", "shape": "round-rectangle",
    "width": (n) => labelWidth(n.data("label")), "height": 28,
    "font-family": "system-ui, sans-serif", "border-width": 0}},
  {selector: "node[kind = 'thread']", style: {"font-weight": "bold", "height": 34}},
  {selector: "node[kind = 'step']", style: {"shape": "ellipse", "background-color": "#e9ecef", "color": "#495057"}},
  {selector: "node[kind = 'hitl']", style: {"shape": "cut-rectangle", "color": "#3d2c00"}},
  {selector: "node:selected", style: {"border-width": 3, "border-color": "#3b5bdb"}},
  {selector: "edge", style: {"width": 1.5, "line-color": "#adb5bd", "target-arrow-color": "#adb5bd",
    "target-arrow-shape": "triangle", "curve-style": "bezier", "arrow-scale": 0.8}},
  {selector: "edge[kind = 'spawn']", style: {"line-style": "dashed", "line-color": "#0c8599",
    "target-arrow-color": "#0c8599", "width": 2, "label": "data(label)", "font-size": 10, "color": "#0c8599",
    "text-background-color": "#fff", "text-background-opacity": 1}},
  {selector: "edge[kind = 'report']", style: {"line-style": "dashed", "line-color": "#2b8a3e",
    "target-arrow-color": "#2b8a3e", "width": 2, "label": "data(label)", "font-size": 10, "color": "#2b8a3e",
    "text-background-color": "#fff", "text-background-opacity": 1}},
];

export async function showGraph(body, ctx) {
  const box = h("div#cy");
  const detail = h("div.detail#graph-detail");
  const info = h("span.muted");
  const legend = h("div.legend", [["run", "run"], ["step", "step"], ["model", "model call"], ["tool", "tool"],
    ["hitl", "approval"], ["subagent", "subagent"], ["ok", "end"]].map(([k, label]) =>
    h("span", h("i", {style: `background:${COLORS[k]}`}), label)));
  let cy = null;
  const zoom = (f) => cy.zoom({level: cy.zoom() * f, renderedPosition: {x: box.clientWidth / 2, y: box.clientHeight / 2}});
  clear(body, h("div.graph-wrap",
    h("div.graph-main",
      h("div.tl-tools", h("button#zoom-in", {onclick: () => zoom(1.25)}, "Zoom +"),
        h("button#zoom-out", {onclick: () => zoom(0.8)}, "Zoom −"),
        h("button#fit", {onclick: () => cy.fit(undefined, 30)}, "Fit"),
        h("button#export-png", {onclick: () => download(`run-${ctx.id}.png`, cy.png({full: true, scale: 2, bg: "#ffffff", output: "blob"}))}, "Export PNG"),
        h("button#export-svg", {onclick: () => download(`run-${ctx.id}.svg`, toSvg(cy), "image/svg+xml")}, "Export SVG"),
        h("span.grow"), legend, info),
      box),
    detail));
  const events = await allEvents(ctx.agency, ctx.id, {correlationId: ctx.thread.correlationId,
    types: JSON.parse(document.getElementById("event-types").textContent).filter((t) => t !== "model.delta")});
  const graph = graphOf(events, ctx.id);
  info.textContent = `${graph.nodes.length} nodes · ${graph.lanes} thread${graph.lanes > 1 ? "s" : ""}`;
  cy = cytoscape({container: box, elements: [...graph.nodes, ...graph.edges], style: STYLE,
    layout: {name: "preset", fit: true, padding: 30}, wheelSensitivity: 0.3, minZoom: 0.05, maxZoom: 4});
  cy.on("tap", "node", (evt) => {
    const e = evt.target.data("event");
    detail.classList.add("open");
    clear(detail, h("div.row", {style: "margin-bottom:8px"}, h("b", `#${e.seq} ${e.type}`), h("span.grow"),
      h("button.small", {onclick: () => forkAt(ctx.agency, e)}, "Fork from here"),
      h("button.small", {title: "close", onclick: () => detail.classList.remove("open")}, "×")),
    h("div", e.threadId === ctx.id ? "this thread" : h("a", {href: `#/a/${ctx.agency}/t/${e.threadId}/graph`}, `thread ${shortId(e.threadId)}`)),
    h("p.muted", summarize(e)), h("div.json", highlight(json(e.data), "json")));
  });
  window.agencyGraph = cy;  // for tests and the curious
  return () => cy.destroy();
}
