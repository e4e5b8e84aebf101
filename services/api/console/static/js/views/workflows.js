// Workflows: the agency's list, and one workflow's channel run by run, its members (each a
// thread: open it for its chat, approvals and timeline), documents and proposals. The read
// models are polled while the page is open; the channel is read after its last sequence.

import {api, paths} from "../api.js";
import {badge, clear, h, shortId, time, when} from "../dom.js";
import {markdown} from "../markdown.js";
import {flash} from "../ui.js";

const POLL_MS = 1500;

function label(w) {
  return "@" + w.name + (w.tag ? ":" + w.tag : "");
}

export async function showWorkflows(main, agency) {
  const rows = await api("GET", `${paths.agency(agency)}/workflows`);
  clear(main,
    h("h1", "Workflows"),
    h("p.muted", "Agents working together in a shared channel: a mention makes a member act. ",
      "Create one with ", h("code", "agency workflow run FILE"), " or ",
      h("code", "POST /agency/{id}/workflows"), " (docs/workflows.md)."),
    rows.length
      ? h("table.grid#workflows",
        h("tr", h("th", "workflow"), h("th", "status"), h("th.num", "messages"), h("th", "members"),
          h("th", "updated")),
        rows.map((w) => h("tr",
          h("td", h("a", {href: `#/a/${agency}/w/${w.id}`}, label(w))),
          h("td", badge(w.status)), h("td.num", w.messageCount),
          h("td", w.members.map((m) => h("span.member", "@" + m.name, " ", badge(m.status)))),
          h("td", when(w.updatedAt)))))
      : h("div.empty", "No workflow yet."));
}

export async function showWorkflow(main, agency, ref) {
  const base = `${paths.agency(agency)}/workflows/${encodeURIComponent(ref)}`;
  let view = await api("GET", base);
  const messages = [];
  let lastSeq = 0;
  let filterRun = "";
  let filterMember = "";
  let timer = null;
  let closed = false;
  let sideShown = "";  // what the side column shows, to redraw it only when it changed
  const openDocs = new Set();

  const head = h("div.thead");
  const runSelect = h("select#wf-run", {title: "workflow run", onchange: () => { filterRun = runSelect.value; renderChannel(); }});
  const memberSelect = h("select#wf-member", {title: "whose inbox", onchange: () => { filterMember = memberSelect.value; renderChannel(); }});
  const channel = h("div.transcript.channel#channel");
  const input = h("textarea#wf-message", {rows: 2, placeholder: "Post to the channel; @name asks a member to act (Ctrl+Enter sends)"});
  const to = h("input#wf-to", {placeholder: "@members (optional)", style: "width:220px"});
  const side = h("div.col.side-col#wf-side");
  main.className = "fill";
  clear(main, head, h("div.view",
    h("div.chat",
      h("div.row", {style: "margin-bottom:8px"}, "Run ", runSelect, " Show ", memberSelect),
      channel,
      h("div.composer", input,
        h("div.row", to, h("span.grow"), h("button.primary#wf-send", {onclick: send}, "Post")))),
    side));
  input.addEventListener("keydown", (e) => { if (e.key === "Enter" && (e.ctrlKey || e.metaKey)) send(); });

  async function send() {
    const content = input.value.trim();
    if (!content) return;
    const names = to.value.split(/[\s,]+/).map((n) => n.replace(/^@/, "")).filter(Boolean);
    try {
      const r = await api("POST", `${base}/messages`, {content, to: names});
      input.value = "";
      flash(`posted ${shortId(r.messageId)}`);
      poll();
    } catch (e) {
      flash(e.message, true);
    }
  }

  async function stop() {
    try {
      await api("POST", `${base}/stop`, {reason: "stopped from the console"});
      flash("stop sent");
      poll();
    } catch (e) {
      flash(e.message, true);
    }
  }

  function renderHead() {
    const limits = view.limits || {};
    // A run whose members are all idle has nothing more to do until the next message.
    const busy = view.members.some((m) => m.status !== "idle");
    const shownStatus = view.status === "running" && !busy ? "settled" : view.status;
    clear(head,
      h("span.title", label(view)),
      h("span.tid", {title: "workflow id"}, view.id),
      badge(shownStatus, shownStatus + (view.stopReason ? ` · ${view.stopReason}` : "")),
      h("span.mono.muted", `${view.messageCount} messages · at most ${limits.max_hops ?? limits.maxHops ?? "?"} hops, ` +
        `${limits.max_messages ?? limits.maxMessages ?? "?"} messages a run`),
      h("span.spacer"),
      h("button.danger#wf-stop", {disabled: view.status !== "running", onclick: stop}, "Stop run"));
  }

  function runsOf() {
    const runs = [];
    for (const m of messages) if (m.runId && !runs.includes(m.runId)) runs.push(m.runId);
    return runs;
  }

  function renderFilters() {
    const runs = runsOf();
    const keepRun = filterRun;
    clear(runSelect, h("option", {value: ""}, `all (${runs.length})`),
      runs.map((r, i) => h("option", {value: r}, `#${i + 1} ${shortId(r)} (${messages.filter((m) => m.runId === r).length})`)));
    runSelect.value = runs.includes(keepRun) ? keepRun : "";
    const keepMember = filterMember;
    clear(memberSelect, h("option", {value: ""}, "the whole channel"),
      view.members.map((m) => h("option", {value: m.name}, `@${m.name}'s inbox`)));
    memberSelect.value = view.members.some((m) => m.name === keepMember) ? keepMember : "";
  }

  function messageNode(m) {
    const kind = m.sender === "user" ? "user" : m.sender === "system" ? "system" : "member";
    return h(`div.msg.${kind}.chmsg`, {"data-seq": m.seq, "data-sender": m.sender},
      h("div.who", "@" + m.sender, h("span.meta", ` · hop ${m.hop} · ${time(m.postedAt)}`),
        m.mentions.length ? h("span.mentions", " → ", m.mentions.map((n) => h("span.mention", "@" + n))) : null),
      markdown(m.content));
  }

  function renderChannel() {
    const atBottom = channel.scrollHeight - channel.scrollTop - channel.clientHeight < 40;
    const runs = runsOf();
    const shown = messages.filter((m) => (!filterRun || m.runId === filterRun) &&
      (!filterMember || (m.mentions.includes(filterMember) && m.sender !== filterMember)));
    const nodes = [];
    let run;
    for (const m of shown) {
      if (m.runId !== run) {
        run = m.runId;
        nodes.push(h("div.run-divider", run ? `run #${runs.indexOf(run) + 1} · ${shortId(run)}` : "outside a run"));
      }
      nodes.push(messageNode(m));
    }
    clear(channel, nodes.length ? nodes : h("div.empty", "No messages yet."));
    if (atBottom) channel.scrollTop = channel.scrollHeight;
  }

  function renderSide(documents, proposals) {
    clear(side,
      h("h2", "Members"),
      h("table.grid#wf-members", view.members.map((m) => h("tr",
        h("td", {title: `blueprint ${m.agentType}`}, h("b", "@" + m.name)),
        h("td", badge(m.status)), h("td.num", `${m.runs} run${m.runs === 1 ? "" : "s"}`),
        h("td", h("a", {href: `#/a/${agency}/t/${m.threadId}`, title: m.threadId}, "thread →"))))),
      h("h2", "Documents"),
      documents.length
        ? documents.map((d) => h("details.card.doc", {open: openDocs.has(d.path),
          ontoggle: (e) => { if (e.target.open) openDocs.add(d.path); else openDocs.delete(d.path); }},
          h("summary", h("span.mono", d.path), h("span.muted", ` · @${d.author}`)), markdown(d.content)))
        : h("div.muted", "none"),
      h("h2", "Proposals"),
      proposals.length
        ? proposals.map((p) => h("div.card.proposal",
          h("div.row", h("b", p.title), h("span.grow"), badge(p.status === "closed" ? "completed" : "running", p.status)),
          p.description ? h("div.muted", p.description) : null,
          h("ul.tally", p.options.map((o) => h("li", {class: p.outcome === o ? "won" : ""},
            `${o}: ${(p.tally || {})[o] ?? Object.values(p.votes).filter((v) => v === o).length}`))),
          h("div.muted", Object.entries(p.votes).map(([who, choice]) => `@${who} → ${choice}`).join(" · ") || "no votes yet"),
          p.outcome ? h("div", "outcome: ", h("b", p.outcome)) : null))
        : h("div.muted", "none"));
  }

  async function poll() {
    clearTimeout(timer);
    if (closed) return;
    try {
      const before = messages.length;
      let page;
      do {
        page = await api("GET", `${base}/channel`, undefined, {afterSeq: lastSeq, limit: 500});
        messages.push(...page.messages);
        if (page.messages.length) lastSeq = page.messages[page.messages.length - 1].seq;
      } while (page.hasMore && !closed);
      const [fresh, documents, proposals] = await Promise.all([api("GET", base),
        api("GET", `${base}/documents`), api("GET", `${base}/proposals`)]);
      view = fresh;
      renderHead();
      if (messages.length !== before || !channel.childElementCount) {
        renderFilters();
        renderChannel();
      }
      const shown = JSON.stringify([view.members, documents, proposals]);
      if (shown !== sideShown) {
        sideShown = shown;
        renderSide(documents, proposals);
      }
    } catch (e) {
      flash(e.message, true);
    }
    if (!closed) timer = setTimeout(poll, POLL_MS);
  }

  renderHead();
  await poll();
  channel.scrollTop = channel.scrollHeight;
  return () => { closed = true; clearTimeout(timer); };
}
