// Blueprints of an agency: the list (static ones and the agency's own), one as JSON to view
// or edit (a code agent's with its settings panel), and a new one; errors shown where they
// are (JSON syntax with line and column, or what the API refused).

import {api, paths} from "../api.js";
import {clear, h, json} from "../dom.js";
import {flash, go} from "../ui.js";
import {settingsPanel} from "./settings.js";

const TEMPLATE = {
  name: "researcher",
  description: "Looks things up and writes notes.",
  prompt: "You research the question and write your findings to notes.md.",
  model: "",
  tags: ["default"],
  config: {},
};
const EDITABLE = ["name", "description", "prompt", "model", "tags", "config", "type", "sideA", "sideB",
  "maxSessionTurns", "exposeAsTool", "toolDescription"];

function editable(blueprint) {
  const out = {};
  for (const key of EDITABLE) if (blueprint[key] !== undefined && blueprint[key] !== null) out[key] = blueprint[key];
  return out;
}

/** Where a JSON.parse error points, as "line L, column C", when the engine says. */
function where(text, error) {
  const m = /position (\d+)/.exec(error.message) || /line (\d+) column (\d+)/.exec(error.message);
  if (!m) return "";
  if (m.length === 3) return ` (line ${m[1]}, column ${m[2]})`;
  const before = text.slice(0, Number(m[1])).split("\n");
  return ` (line ${before.length}, column ${before[before.length - 1].length + 1})`;
}

export async function showBlueprints(main, agency, name) {
  const list = await api("GET", `${paths.agency(agency)}/blueprints`);
  const current = name === "new" ? null : list.find((b) => b.name === name) || list[0];
  const editor = h("textarea#blueprint-json", {spellcheck: false});
  editor.value = json(current ? editable(current) : TEMPLATE);
  const error = h("div.err#blueprint-error");
  const check = () => {
    try {
      JSON.parse(editor.value);
      editor.classList.remove("invalid");
      error.textContent = "";
      return true;
    } catch (e) {
      editor.classList.add("invalid");
      error.textContent = "Not valid JSON" + where(editor.value, e) + ": " + e.message;
      return false;
    }
  };
  editor.addEventListener("input", check);
  const save = async () => {
    if (!check()) return;
    try {
      const saved = await api("POST", `${paths.agency(agency)}/blueprints`, JSON.parse(editor.value));
      flash(`saved ${saved.name} (revision ${saved.revision ?? "pending"})`);
      go(`#/a/${agency}/blueprints/${encodeURIComponent(saved.name)}`);
    } catch (e) {
      editor.classList.add("invalid");
      error.textContent = e.message;
    }
  };
  clear(main, h("h1", "Blueprints"), h("div.bp",
    h("div.bp-list.card",
      h("div.row", {style: "margin-bottom:8px"}, h("b.grow", `${list.length} blueprints`),
        h("a", {href: `#/a/${agency}/blueprints/new`}, "+ new")),
      list.map((b) => h("a", {href: `#/a/${agency}/blueprints/${encodeURIComponent(b.name)}`,
        class: current && b.name === current.name ? "on" : ""},
      h("span", b.name), h("span.muted", b.source === "dynamic" ? `rev ${b.revision}` : "static")))),
    h("div.bp-edit.card",
      h("div.row", {style: "margin-bottom:8px"},
        h("b", current ? current.name : "New blueprint"),
        current ? h("span.badge", current.source) : null,
        current && current.source === "static" ? h("span.muted", "saving makes an override for this agency") : null,
        h("span.grow"), h("button.primary#save-blueprint", {onclick: save}, "Save")),
      editor, error,
      h("p.muted", "tags pick tools and middleware (default: planning, files, subagents; hitl: approvals). " +
        "config holds maxSteps, tokenBudget, hitl.tools, subagents.subagents, callableAgents, and extra " +
        "for settings of your own middleware."))));
  // A code agent's settings, under its blueprint.
  if (current && current.kind === "code") main.querySelector(".bp-edit").append(await settingsPanel(agency, current.name));
}
