// The console's entry: the header, the hash router and the pages that are not per thread.
//   #/key                      the API key
//   #/agencies                 agencies: list, create
//   #/a/AGENCY                 the agency's threads (tree in the side bar)
//   #/a/AGENCY/blueprints[/N]  blueprints: list, view, create, edit
//   #/a/AGENCY/usage           tokens and cost of the tenant, by blueprint and model
//   #/a/AGENCY/webhooks        the agency's webhook subscriptions and their deliveries
//   #/a/AGENCY/t/THREAD[/TAB]  one thread: chat, timeline, graph, files, state, replay, usage,
//                              settings (a code agent's)
//   #/a/AGENCY/workflows       the agency's workflows
//   #/a/AGENCY/w/WORKFLOW      one workflow: its channel run by run, members, documents, proposals

import {api, apiKey, setApiKey} from "./api.js";
import {clear, h, when} from "./dom.js";
import {showAgency} from "./views/agency.js";
import {showBlueprints} from "./views/blueprints.js";
import {ThreadTree} from "./views/tree.js";
import {showThread} from "./views/thread.js";
import {showAgencyUsage} from "./views/usage.js";
import {showWebhooks} from "./views/webhooks.js";
import {showWorkflow, showWorkflows} from "./views/workflows.js";
import {flash, go} from "./ui.js";

const $ = (id) => document.getElementById(id);
// Each route renders into a <main> of its own, put in place of the last one: a view still
// loading when the user moves on (its awaits outlive the route) then fills a detached
// element instead of overwriting the page that replaced it.
let main = $("main");

function freshMain() {
  const next = document.createElement("main");
  next.id = "main";
  main.replaceWith(next);
  main = next;
}
const side = $("side");
let agencies = [];
let tree = null;
let leave = null;  // the current view's clean-up (closes its streams)

function keyPage() {
  side.replaceChildren();
  const input = h("input", {type: "password", placeholder: "ak_…", value: apiKey(),
    style: "width:100%", autocomplete: "off"});
  const error = h("div.err");
  const save = async () => {
    setApiKey(input.value.trim());
    try {
      await loadAgencies();
      go("#/agencies");
    } catch (e) {
      error.textContent = e.message;
    }
  };
  clear(main, h("div.card.login",
    h("h1", "Sign in with an API key"),
    h("p.muted", "Every call the console makes uses this key; it stays in this browser."),
    input, h("div.row", {style: "margin-top:8px"}, h("button.primary", {onclick: save}, "Use this key")),
    error));
  input.addEventListener("keydown", (e) => e.key === "Enter" && save());
  input.focus();
}

async function loadAgencies() {
  agencies = await api("GET", "/agencies");
  const select = $("agency");
  select.replaceChildren(h("option", {value: ""}, "— agency —"),
    ...agencies.map((a) => h("option", {value: a.id}, a.name)));
}

function agenciesPage() {
  side.replaceChildren();
  tree = null;
  const name = h("input", {placeholder: "name of the new agency"});
  const error = h("div.err");
  const create = async () => {
    error.textContent = "";
    try {
      const created = await api("POST", "/agencies", {name: name.value.trim()});
      await loadAgencies();
      go(`#/a/${created.id}`);
    } catch (e) {
      error.textContent = e.message;
    }
  };
  clear(main,
    h("h1", "Agencies"),
    h("div.card", h("div.row", name, h("button.primary#create-agency", {onclick: create}, "Create agency")), error),
    agencies.length
      ? h("table.grid", h("tr", h("th", "name"), h("th", "id"), h("th", "created")),
        agencies.map((a) => h("tr",
          h("td", h("a", {href: `#/a/${a.id}`}, a.name)),
          h("td.mono", a.id), h("td", when(a.createdAt)))))
      : h("div.empty", "No agency yet: create one."));
}

function nav(agency, page) {
  const links = [["threads", "Threads"], ["workflows", "Workflows"], ["blueprints", "Blueprints"],
    ["usage", "Usage"], ["webhooks", "Webhooks"]];
  clear($("nav"), agency && links.map(([key, label]) => h("a", {
    href: key === "threads" ? `#/a/${agency}` : `#/a/${agency}/${key}`,
    class: page === key ? "on" : "",
  }, label)));
}

async function route() {
  if (leave) { leave(); leave = null; }
  freshMain();
  const stage = main;
  const current = () => stage === main;
  const parts = location.hash.replace(/^#\/?/, "").split("/").map(decodeURIComponent);
  if (!apiKey() || parts[0] === "key") { nav(null); return keyPage(); }
  if (!agencies.length) {
    try { await loadAgencies(); } catch (e) { if (current()) { flash(e.message, true); keyPage(); } return; }
    if (!current()) return;
  }
  if (parts[0] !== "a" || !parts[1]) { nav(null); $("agency").value = ""; return agenciesPage(); }
  const agency = parts[1];
  if (!agencies.some((a) => a.id === agency)) await loadAgencies().catch(() => {});
  if (!current()) return;
  $("agency").value = agency;
  const page = {t: "threads", w: "workflows"}[parts[2]] || parts[2] || "threads";
  nav(agency, page);
  if (!tree || tree.agency !== agency) {
    if (tree) tree.close();
    tree = new ThreadTree(side, agency, (id) => go(`#/a/${agency}/t/${id}`));
  }
  tree.select(parts[2] === "t" ? parts[3] : null);
  tree.attach();
  try {
    let left = null;
    if (parts[2] === "t" && parts[3]) left = await showThread(stage, agency, parts[3], parts[4] || "chat");
    else if (parts[2] === "w" && parts[3]) left = await showWorkflow(stage, agency, parts[3]);
    else if (parts[2] === "workflows") await showWorkflows(stage, agency);
    else if (parts[2] === "blueprints") await showBlueprints(stage, agency, parts[3]);
    else if (parts[2] === "usage") await showAgencyUsage(stage, agency);
    else if (parts[2] === "webhooks") await showWebhooks(stage, agency);
    else await showAgency(stage, agency, (agencies.find((a) => a.id === agency) || {}).name);
    // A view that finished loading after the user moved on closes what it opened.
    if (typeof left === "function") {
      if (current()) leave = left;
      else left();
    }
  } catch (e) {
    if (current()) clear(stage, h("div.card.err", e.message));
  }
}

$("agency").addEventListener("change", (e) => go(e.target.value ? `#/a/${e.target.value}` : "#/agencies"));
// `agency up` prints a link carrying the key in the fragment (never sent to a server).
const fragment = new URLSearchParams(location.hash.slice(1));
if (fragment.get("key")) {
  setApiKey(fragment.get("key"));
  history.replaceState(null, "", location.pathname + location.search + "#/agencies");
}
window.addEventListener("hashchange", route);
route();
