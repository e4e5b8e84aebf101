// The replay tab: re-execute the thread (and its subagents) with the current code over its
// recorded history, and show, per thread, the record and the re-execution side by side
// with the first divergence highlighted.

import {api} from "../api.js";
import {badge, clear, h, shortId} from "../dom.js";
import {toConsoleEvent} from "../events.js";
import {forkAt} from "./timeline.js";

export function showReplay(body, ctx) {
  const tree = h("input", {type: "checkbox", checked: true});
  const out = h("div#replay-report");
  const run = h("button.primary#reexecute", {onclick: go}, "Re-execute");
  clear(body, h("div", {style: "overflow:auto;padding:12px 0"},
    h("div.card", h("div.row", run, h("label", tree, " with its subagents"), h("span.grow"),
      h("span.muted", "Runs today's code over the recorded inputs, in memory: no model or tool is called, nothing is written.")),
    ),
    out));

  async function go() {
    run.disabled = true;
    clear(out, h("div.muted", "Re-executing…"));
    try {
      const report = await api("POST", `${ctx.base}/reexecute`, {tree: tree.checked});
      clear(out, h("div.row", {style: "margin-bottom:10px"},
        badge(report.same ? "same" : "diverged", report.same ? "same" : "diverged"),
        h("span", `${report.compared} events compared across ${report.threads.length} thread${report.threads.length > 1 ? "s" : ""}`)),
      report.threads.map((t) => thread(ctx, t)));
      const first = out.querySelector(".diverge");
      if (first) first.closest(".replay-thread").scrollIntoView({block: "start"});
    } catch (e) {
      clear(out, h("div.card.err", e.message));
    } finally {
      run.disabled = false;
    }
  }
}

const CONTEXT = 6;  // equal events shown around the divergence

function thread(ctx, t) {
  const at = t.divergence ? t.divergence.index : -1;
  const length = Math.max(t.recorded.length, t.reexecuted.length);
  const grid = h("div.sbs");
  let from = at >= 0 ? Math.max(0, at - CONTEXT) : 0;
  let to = at >= 0 ? Math.min(length, at + CONTEXT + 1) : Math.min(length, 4);
  const cell = (side, i, cls) => {
    const e = side[i];
    if (!e) return h(`div${cls}.muted`, "(nothing)");
    return h(`div${cls}`, {title: e.summary}, h("b.mono", `#${e.seq} ${e.type}`), " ", h("span.muted", e.summary));
  };
  const fold = (count, what, show) => h("div.fold", {onclick: () => { show(); draw(); }}, `⋯ ${count} ${what} (show)`);
  const draw = () => {
    clear(grid, h("div.h.i", "#"), h("div.h", "recorded"), h("div.h", "re-executed"));
    if (from > 0) grid.append(fold(from, "equal events", () => { from = 0; }));
    for (let i = from; i < to; i++) {
      const cls = i === at ? ".diverge" : at >= 0 && i > at ? ".after" : "";
      const left = cell(t.recorded, i, cls);
      if (t.recorded[i]) {
        const event = toConsoleEvent(t.recorded[i].event);
        left.append(" ", h("button.small", {onclick: () => forkAt(ctx.agency, event), title: "fork the recorded thread here"}, "fork"));
      }
      grid.append(h(`div.i${cls}`, i + 1), left, cell(t.reexecuted, i, cls));
    }
    if (to < length) grid.append(fold(length - to, "more events", () => { to = length; }));
  };
  draw();
  return h("div.replay-thread.card",
    h("div.row", {style: "margin-bottom:8px"}, h("b", `thread ${shortId(t.threadId)}`),
      t.depth ? h("span.muted", `subagent (depth ${t.depth})`) : h("span.muted", "root"),
      badge(t.same ? "same" : "diverged", t.same ? "same" : `diverged at event ${at + 1}`),
      h("span.muted", `${t.compared} compared equal`)),
    t.divergence ? h("ul.diffs", t.divergence.differences.map((d) => h("li", d))) : null,
    t.note ? h("div.muted", "note: " + t.note) : null,
    t.error ? h("div.err", "error: " + t.error) : null,
    grid);
}
