// The timeline tab: every event of the thread (or its whole tree), filtered by type and
// run, paged from `/events` as the list scrolls and rendered virtually (only the rows in
// view exist), then live from the stream. A row opens its payload; "fork" starts a new
// thread from the history up to that event and opens it.

import {api, paths} from "../api.js";
import {clear, h, json, shortId, time} from "../dom.js";
import {EventFeed, eventsPage, family, summarize} from "../events.js";
import {highlight} from "../markdown.js";
import {flash, go} from "../ui.js";

const ROW = 28;
const PAGE = 500;
const EVENT_TYPES = JSON.parse(document.getElementById("event-types").textContent);

export function typeChoices() {
  const families = [...new Set(EVENT_TYPES.map(family))];
  return [
    ["nodelta", "all but model.delta", EVENT_TYPES.filter((t) => t !== "model.delta")],
    ["all", "every event", null],
    ...families.map((f) => [`fam:${f}`, `${f}.*`, EVENT_TYPES.filter((t) => family(t) === f)]),
    ...EVENT_TYPES.map((t) => [`type:${t}`, t, [t]]),
  ];
}

export async function forkAt(agency, event) {
  try {
    const fork = await api("POST", `${paths.thread(agency, event.threadId)}/fork`, {atSeq: event.seq});
    flash(`forked at #${event.seq} into ${shortId(fork.threadId)}`);
    go(`#/a/${agency}/t/${fork.threadId}`);
  } catch (e) {
    flash(e.message, true);
  }
}

export function showTimeline(body, ctx) {
  const choices = typeChoices();
  const typeSelect = h("select#tl-type", choices.map(([v, label]) => h("option", {value: v}, label)));
  const runSelect = h("select#tl-run", h("option", {value: ""}, "every run"));
  const scope = h("select#tl-scope", h("option", {value: "thread"}, "this thread"),
    h("option", {value: "tree"}, "whole tree"));
  const follow = h("input", {type: "checkbox", checked: true});
  const count = h("span.muted");
  const list = h("div.vlist#timeline");
  const spacer = h("div", {style: "position:relative"});
  list.append(spacer);
  const detail = h("div.detail#event-detail", h("div.muted", "Select an event to see its payload."));
  clear(body, h("div.tl",
    h("div.tl-main",
      h("div.tl-tools", typeSelect, runSelect, scope, h("label", follow, " follow live"), h("span.grow"), count),
      list),
    detail));

  let loaded = [];       // every event loaded (type filter applied by the server)
  let rows = [];         // those shown (the run filter applied)
  let next = 1, hasMore = true, loading = false, selected = null, feeds = [], reveal = false;
  const seen = new Set();

  const wantedTypes = () => choices.find(([v]) => v === typeSelect.value)[2];
  const passes = (e) => {
    const types = wantedTypes();
    return (!types || types.includes(e.type)) && (!runSelect.value || e.runId === runSelect.value);
  };

  function render() {
    spacer.style.height = `${rows.length * ROW}px`;
    const first = Math.max(0, Math.floor(list.scrollTop / ROW) - 10);
    const last = Math.min(rows.length, Math.ceil((list.scrollTop + list.clientHeight) / ROW) + 10);
    const nodes = [];
    for (let i = first; i < last; i++) nodes.push(row(rows[i], i));
    spacer.replaceChildren(...nodes);
    count.textContent = `${rows.length} events${hasMore ? " loaded, more on scroll" : ""}`;
    if (hasMore && !loading && last >= rows.length - 5) loadMore();
  }

  function row(e, i) {
    const tree = scope.value === "tree";
    return h("div.vrow", {
      style: `top:${i * ROW}px`, class: selected && e.eventId === selected.eventId ? "vrow sel" : "vrow", "data-seq": e.seq,
      "data-type": e.type, "data-run": e.runId || "", onclick: () => open(e),
    }, h("span.seq", e.seq), h("span.ts", time(e.ts)),
    tree ? h("span.who", {title: e.threadId}, e.threadId === ctx.id ? "this thread" : shortId(e.threadId)) : null,
    h(`span.etype.fam-${family(e.type)}`, e.type), h("span.sum", summarize(e)),
    h("button.small.fork", {title: "fork a new thread from the history up to this event",
      onclick: (ev) => { ev.stopPropagation(); forkAt(ctx.agency, e); }}, "fork"));
  }

  function open(e) {
    selected = e;
    render();
    const fields = [["type", e.type], ["thread", e.threadId], ["seq", e.seq], ["run", e.runId || "—"],
      ["time", e.ts], ["event id", e.eventId], ["stream seq", e.streamSeq ?? "—"]];
    clear(detail, h("div.row", {style: "margin-bottom:8px"}, h("b", `#${e.seq} ${e.type}`), h("span.grow"),
      h("button.primary#fork-here", {onclick: () => forkAt(ctx.agency, e)}, "Fork from here")),
    h("dl", fields.map(([k, v]) => [h("dt", k), h("dd", String(v))])),
    h("h2", "data"), h("div.json", highlight(json(e.data), "json")));
  }

  function add(events) {
    let added = false;
    for (const e of events) {
      const key = e.eventId || `${e.threadId}:${e.seq}`;
      if (seen.has(key)) continue;
      seen.add(key);
      loaded.push(e);
      if (e.runId && ![...runSelect.options].some((o) => o.value === e.runId)) {
        runSelect.append(h("option", {value: e.runId}, `run ${shortId(e.runId)}`));
      }
      if (passes(e)) { rows.push(e); added = true; }
    }
    return added;
  }

  async function loadMore() {
    loading = true;
    try {
      const tree = scope.value === "tree";
      const page = await eventsPage(ctx.agency, ctx.id, {fromSeq: next, limit: PAGE, types: wantedTypes(),
        correlationId: tree ? ctx.thread.correlationId : undefined});
      add(page.events);
      next = page.next;
      // After a filter change, bring the selected event back into view once it is loaded.
      const at = reveal && selected ? rows.findIndex((e) => e.eventId === selected.eventId) : -1;
      if (at >= 0) {
        reveal = false;
        spacer.style.height = `${rows.length * ROW}px`;
        list.scrollTop = Math.max(0, at * ROW - list.clientHeight / 3);
      }
      hasMore = page.hasMore;
      if (!hasMore) goLive();
    } catch (e) {
      flash(e.message, true);
      hasMore = false;
    } finally {
      loading = false;
    }
    render();
  }

  async function goLive() {
    closeFeeds();
    const onEvent = (e) => {
      if (add([e])) {
        render();
        if (follow.checked) list.scrollTop = list.scrollHeight;
      }
    };
    if (scope.value === "thread") {
      feeds.push(ctx.listen(onEvent));  // the thread's own feed, shared with the header
      return;
    }
    const tree = await api("GET", `${ctx.base}/tree`);
    const ids = [];
    const walk = (n) => { ids.push(n.id); (n.children || []).forEach(walk); };
    walk(tree);
    for (const id of ids) {
      const last = Math.max(0, ...loaded.filter((e) => e.threadId === id).map((e) => e.seq));
      const feed = new EventFeed(ctx.agency, id, last, onEvent);
      feeds.push(() => feed.close());
    }
  }

  function closeFeeds() {
    for (const close of feeds) close();
    feeds = [];
  }

  function reset() {
    closeFeeds();
    loaded = []; rows = []; next = 1; hasMore = true; reveal = true;
    seen.clear();
    list.scrollTop = 0;
    render();
  }

  typeSelect.onchange = reset;
  scope.onchange = reset;
  runSelect.onchange = () => { rows = loaded.filter(passes); list.scrollTop = 0; render(); };
  list.addEventListener("scroll", () => requestAnimationFrame(render));
  render();
  return closeFeeds;
}
