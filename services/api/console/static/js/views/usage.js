// Usage: tokens and cost per run and per thread (of a thread's tree), and the tenant's
// totals by blueprint and by model.

import {api, paths} from "../api.js";
import {badge, clear, h, num, shortId, usd, when} from "../dom.js";

function totals(runs) {
  return runs.reduce((t, r) => ({inputTokens: t.inputTokens + r.inputTokens,
    outputTokens: t.outputTokens + r.outputTokens, costUsd: t.costUsd + r.costUsd,
    steps: t.steps + r.step}), {inputTokens: 0, outputTokens: 0, costUsd: 0, steps: 0});
}

function flatten(node, depth = 0, out = []) {
  out.push({...node, depth});
  for (const child of node.children || []) flatten(child, depth + 1, out);
  return out;
}

export async function showThreadUsage(body, ctx) {
  const tree = await api("GET", `${ctx.base}/tree`);
  const nodes = flatten(tree);
  const runsOf = await Promise.all(nodes.map((n) =>
    n.id === ctx.id ? ctx.runs : api("GET", `${paths.thread(ctx.agency, n.id)}/runs`)));
  const all = totals(runsOf.flat());
  clear(body, h("div", {style: "overflow:auto;padding:12px 0"},
    h("h2", "Runs of this thread"),
    h("table.grid#usage-runs",
      h("tr", h("th", "run"), h("th", "status"), h("th", "started"), h("th.num", "steps"),
        h("th.num", "input tokens"), h("th.num", "output tokens"), h("th.num", "cost")),
      ctx.runs.map((r) => h("tr", h("td.mono", shortId(r.runId)), h("td", badge(r.status)),
        h("td", when(r.startedAt || r.createdAt)), h("td.num", `${r.step}/${r.maxSteps}`),
        h("td.num", num(r.inputTokens)), h("td.num", num(r.outputTokens)), h("td.num", usd(r.costUsd)))),
      totalRow("thread total", 3, totals(ctx.runs), [totals(ctx.runs).steps])),
    h("h2", "Per thread of the tree"),
    h("table.grid#usage-tree",
      h("tr", h("th", "thread"), h("th", "status"), h("th.num", "runs"), h("th.num", "steps"),
        h("th.num", "input tokens"), h("th.num", "output tokens"), h("th.num", "cost")),
      nodes.map((n, i) => {
        const t = totals(runsOf[i]);
        return h("tr", h("td", {style: `padding-left:${10 + n.depth * 18}px`},
          h("a", {href: `#/a/${ctx.agency}/t/${n.id}/usage`}, `${n.agentType} ${shortId(n.id)}`)),
        h("td", badge(n.status)), h("td.num", runsOf[i].length), h("td.num", t.steps),
        h("td.num", num(t.inputTokens)), h("td.num", num(t.outputTokens)), h("td.num", usd(t.costUsd)));
      }),
      totalRow("tree total", 2, all, [runsOf.flat().length, all.steps]))));
}

function totalRow(label, span, t, counts) {
  return h("tr.total", h("td", {colSpan: span}, label), counts.map((c) => h("td.num", num(c))),
    h("td.num", num(t.inputTokens)), h("td.num", num(t.outputTokens)), h("td.num", usd(t.costUsd)));
}

export async function showAgencyUsage(main, agency) {
  const [byBlueprint, byModel] = await Promise.all([
    api("GET", "/usage", undefined, {groupBy: "blueprint"}),
    api("GET", "/usage", undefined, {groupBy: "model"})]);
  const table = (rows, key, label) => h("table.grid",
    h("tr", h("th", label), h("th.num", "model calls"), h("th.num", "input tokens"),
      h("th.num", "output tokens"), h("th.num", "cost")),
    rows.map((r) => h("tr", h("td", r[key] || "—"), h("td.num", num(r.calls)),
      h("td.num", num(r.inputTokens)), h("td.num", num(r.outputTokens)), h("td.num", usd(r.costUsd)))));
  clear(main, h("h1", "Usage"),
    h("h2", "By blueprint (this agency)"), table(byBlueprint.rows.filter((r) => r.agencyId === agency), "blueprint", "blueprint"),
    h("h2", "By model (the whole tenant)"), table(byModel.rows, "model", "model"),
    h("p.muted", "Per run and per thread: open a thread's Usage tab."));
}
