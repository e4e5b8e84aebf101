// The side bar: the agency's threads as trees (a parent above its subagents), with filters
// by status, agent type and id, a page of root threads at a time, refreshed every few
// seconds; and a form to start a thread.

import {api, paths} from "../api.js";
import {badge, clear, debounce, h, shortId} from "../dom.js";
import {flash} from "../ui.js";

const PAGE = 50;
const REFRESH_MS = 3000;
const STATUSES = ["running", "paused", "completed", "error", "canceled", "idle", "registered"];

export class ThreadTree {
  constructor(root, agency, onOpen) {
    this.root = root;
    this.agency = agency;
    this.onOpen = onOpen;
    this.selected = null;
    this.collapsed = new Set();
    this.pages = 1;
    this.status = h("select", {title: "status", onchange: () => this.reload()});
    this.type = h("select", {title: "agent type", onchange: () => this.reload()});
    this.search = h("input", {type: "search", placeholder: "search by thread id",
      oninput: debounce(() => this.reload(), 250)});
    this.blueprint = h("select", {title: "blueprint of the new thread"});
    this.list = h("div.tree");
    this.more = h("div.tree-more");
    this.node = h("div", {style: "display:contents"},
      h("div.tree-filters", this.status, this.type, this.search),
      h("div.tree-new", this.blueprint, h("button.primary#new-thread", {onclick: () => this.create()}, "New thread")),
      this.list, this.more);
    this.timer = setInterval(() => this.refresh(), REFRESH_MS);
    // The open thread changed: show its status now rather than at the next poll.
    this.onChange = debounce(() => this.refresh(), 300);
    window.addEventListener("agency:thread-changed", this.onChange);
    this.reload();
  }

  attach() {
    if (this.node.parentNode !== this.root) this.root.replaceChildren(this.node);
    this.loadBlueprints();  // a blueprint may have been saved meanwhile
  }

  close() {
    clearInterval(this.timer);
    window.removeEventListener("agency:thread-changed", this.onChange);
  }

  select(id) {
    this.selected = id;
    for (const row of this.list.querySelectorAll(".tnode")) row.classList.toggle("sel", row.dataset.id === id);
  }

  async loadBlueprints() {
    try {
      const list = await api("GET", `${paths.agency(this.agency)}/blueprints`);
      const value = this.blueprint.value;
      clear(this.blueprint, list.map((b) => h("option", {value: b.name, title: b.name}, b.name)));
      if (list.some((b) => b.name === value)) this.blueprint.value = value;
    } catch (e) {
      flash(e.message, true);
    }
  }

  async create() {
    try {
      const thread = await api("POST", `${paths.agency(this.agency)}/agents`, {agentType: this.blueprint.value});
      await this.refresh();
      this.onOpen(thread.id);
    } catch (e) {
      flash(e.message, true);
    }
  }

  reload() {
    this.pages = 1;
    return this.refresh();
  }

  query(cursor) {
    return {status: this.status.value, agentType: this.type.value, q: this.search.value.trim(),
      limit: PAGE, cursor};
  }

  async refresh() {
    const roots = [];
    let page = null;
    let cursor;
    try {
      for (let i = 0; i < this.pages; i++) {
        page = await api("GET", `${paths.agency(this.agency)}/threads`, undefined, this.query(cursor));
        roots.push(...page.roots);
        cursor = page.nextCursor;
        if (!cursor) break;
      }
    } catch (e) {
      flash(e.message, true);
      return;
    }
    this.filters(page);
    const scroll = this.list.scrollTop;
    clear(this.list, roots.length ? roots.map((r) => this.branch(r, 0)) : h("div.empty", "No threads."));
    this.list.scrollTop = scroll;
    const total = Object.values(page.statusCounts).reduce((a, b) => a + b, 0);
    clear(this.more, h("span", `${roots.length} trees · ${total} threads`),
      cursor ? h("button.small", {onclick: () => { this.pages += 1; this.refresh(); }}, "More") : null);
  }

  filters(page) {
    const keep = (select, options) => {
      const value = select.value;
      clear(select, options);
      select.value = value;
    };
    const counts = page.statusCounts;
    keep(this.status, [h("option", {value: ""}, "any status"),
      STATUSES.filter((s) => counts[s] || s === this.status.value)
        .map((s) => h("option", {value: s}, `${s} (${counts[s] || 0})`))]);
    keep(this.type, [h("option", {value: ""}, "any agent type"),
      page.agentTypes.map((t) => h("option", {value: t, title: t}, t))]);
  }

  branch(node, depth) {
    const kids = node.children || [];
    const folded = this.collapsed.has(node.id);
    const twist = h("span.twist", kids.length ? (folded ? "▸" : "▾") : "");
    twist.addEventListener("click", (e) => {
      e.stopPropagation();
      if (folded) this.collapsed.delete(node.id); else this.collapsed.add(node.id);
      this.refresh();
    });
    const row = h("div.tnode", {
      "data-id": node.id,
      class: ["tnode", node.id === this.selected && "sel", !node.match && "nomatch"].filter(Boolean).join(" "),
      style: `padding-left:${10 + depth * 16}px`,
      title: `${node.agentType} ${node.id}\n${node.runCount} runs · ${node.messageCount} messages`,
      onclick: () => this.onOpen(node.id),
    }, twist, h("span.type", {title: node.agentType}, node.agentType), h("span.tid", shortId(node.id)), badge(node.status));
    return [row, folded ? [] : kids.map((k) => this.branch(k, depth + 1))];
  }
}
