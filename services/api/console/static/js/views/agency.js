// An agency's home: what its threads are doing (counts per status), the newest trees and
// its blueprints.

import {api, paths} from "../api.js";
import {badge, clear, h, shortId, when} from "../dom.js";

function count(node) {
  return 1 + (node.children || []).reduce((n, c) => n + count(c), 0);
}

export async function showAgency(main, agency, name) {
  const [page, blueprints] = await Promise.all([
    api("GET", `${paths.agency(agency)}/threads`, undefined, {limit: 15}),
    api("GET", `${paths.agency(agency)}/blueprints`)]);
  const counts = page.statusCounts;
  const total = Object.values(counts).reduce((a, b) => a + b, 0);
  clear(main,
    h("h1", name || "Agency", " ", h("span.mono.muted", {style: "font-size:12px;font-weight:400"}, agency)),
    h("div.row", {style: "gap:12px;margin-bottom:14px"},
      h("div.card.stat", h("div.n", total), h("div.muted", "threads")),
      Object.entries(counts).sort().map(([status, n]) =>
        h("div.card.stat", h("div.n", n), badge(status))),
      h("div.card.stat", h("div.n", blueprints.length),
        h("a", {href: `#/a/${agency}/blueprints`}, "blueprints"))),
    h("h2", "Newest threads"),
    page.roots.length
      ? h("table.grid#recent",
        h("tr", h("th", "agent"), h("th", "thread"), h("th", "status"), h("th.num", "subagents"),
          h("th.num", "runs"), h("th.num", "messages"), h("th", "updated")),
        page.roots.map((t) => h("tr",
          h("td", h("a", {href: `#/a/${agency}/t/${t.id}`}, t.agentType)), h("td.mono", shortId(t.id)),
          h("td", badge(t.status)), h("td.num", count(t) - 1), h("td.num", t.runCount),
          h("td.num", t.messageCount), h("td", when(t.updatedAt)))))
      : h("div.empty", "No threads yet: pick a blueprint on the left and start one."));
}
