// The agency's webhook subscriptions, and each one's latest deliveries: status, attempts,
// the last answer or error, when the next attempt is due (docs/protocols.md).

import {api} from "../api.js";
import {badge, clear, h, when} from "../dom.js";

export async function showWebhooks(main, agency) {
  const base = `/agency/${agency}/webhooks`;
  const {webhooks} = await api("GET", base);
  const deliveries = await Promise.all(webhooks.map((w) =>
    api("GET", `${base}/${w.id}/deliveries`, undefined, {limit: 20})));
  clear(main,
    h("h1", "Webhooks"),
    webhooks.length ? null : h("div.empty",
      "No subscription: POST a URL and event kinds to this agency's /webhooks, or run `agency webhooks add`."),
    webhooks.map((w, i) => h("div.card.webhook", {"data-id": w.id},
      h("h2.mono", w.url),
      h("p.muted", `${w.id} · ${w.events.join(", ")}${w.description ? " · " + w.description : ""}`),
      deliveries[i].deliveries.length
        ? h("table.grid.deliveries",
          h("tr", h("th", "delivery"), h("th", "event"), h("th", "status"), h("th.num", "attempts"),
            h("th", "last answer"), h("th", "next attempt"), h("th", "made")),
          deliveries[i].deliveries.map((d) => h("tr",
            h("td.mono", d.id), h("td", d.event), h("td", badge(d.status)), h("td.num", d.attempts),
            h("td", d.lastError || (d.lastStatus ? String(d.lastStatus) : "—")),
            h("td", d.nextAttemptAt ? when(d.nextAttemptAt) : "—"), h("td", when(d.createdAt)))))
        : h("div.empty", "Nothing delivered yet."))));
}
