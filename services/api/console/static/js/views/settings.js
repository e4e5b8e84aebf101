// A code agent's settings (`GET …/blueprints/NAME/settings`): each field of its declared
// schema with its type, default and the value the next run gets, in a form that saves the
// agency's overrides (`PUT`); what the API refuses (the field and why) shows under it.

import {api, paths} from "../api.js";
import {clear, h, json} from "../dom.js";
import {highlight} from "../markdown.js";
import {flash} from "../ui.js";

const show = (value) => (typeof value === "string" ? value : JSON.stringify(value));

/** The text of an input as a value: raw text for a string field, else JSON when it parses
 * (anything else goes as text, for the API to name the field it does not fit). */
function parse(field, text) {
  if (field.type === "string") return text;
  try {
    return JSON.parse(text);
  } catch {
    return text;
  }
}

/** The panel for code agent `name` of the agency, filled in; re-filled after a save. */
export async function settingsPanel(agency, name) {
  const panel = h("div.card.settings#settings-panel");
  const path = `${paths.agency(agency)}/blueprints/${encodeURIComponent(name)}/settings`;
  const render = (view) => {
    const base = (f) => (f.name in view.registered ? view.registered[f.name] : f.default);
    const inputs = new Map();
    const error = h("div.err#settings-error");
    const save = async () => {
      const overrides = {};
      for (const field of view.fields) {
        const input = inputs.get(field.name);
        const value = parse(field, input.value);
        if (field.name in view.overrides || show(value) !== show(base(field))) overrides[field.name] = value;
      }
      error.textContent = "";
      try {
        const saved = await api("PUT", path, {settings: overrides});
        flash(`settings of ${name} saved; the next run uses them`);
        render(saved);
      } catch (e) {
        error.textContent = e.message;
      }
    };
    const reset = async () => {
      try {
        render(await api("PUT", path, {settings: {}}));
        flash(`settings of ${name} reset`);
      } catch (e) {
        error.textContent = e.message;
      }
    };
    const rows = view.fields.map((f) => {
      const input = h("input", {value: f.value === null && view.settings === null ? "" : show(f.value),
        "data-field": f.name, spellcheck: false, style: "width:100%"});
      inputs.set(f.name, input);
      return h("tr", {"data-field": f.name},
        h("td.mono", f.name, f.required ? h("span.muted", " *") : null),
        h("td.mono.muted", f.type),
        h("td.mono", f.required ? h("span.muted", "required") : show(f.default)),
        h("td", input),
        h("td", f.overridden ? h("span.badge.paused", "agency") : f.name in view.registered
          ? h("span.badge", "registered") : h("span.muted", "default")));
    });
    clear(panel,
      h("div.row", {style: "margin-bottom:8px"}, h("b", "Settings"), h("span.badge", "code agent"),
        h("span.muted.grow", "the values the next run of this agent gets in this agency")),
      view.problem ? h("div.err#settings-problem", view.problem) : null,
      view.fields.length
        ? h("table.grid",
          h("tr", h("th", "field"), h("th", "type"), h("th", "default"), h("th", "value"), h("th", "from")),
          rows)
        : h("p.muted", "This agent declares no Settings schema: it takes any object."),
      h("div.row", {style: "margin-top:8px"},
        h("button.primary#save-settings", {onclick: save, disabled: !view.fields.length}, "Save settings"),
        h("button#reset-settings", {onclick: reset, disabled: !Object.keys(view.overrides).length},
          "Reset to registered"),
        h("span.grow")),
      error,
      view.settingsSchema ? h("details", {style: "margin-top:8px"}, h("summary.muted", "JSON Schema"),
        h("div.json", highlight(json(view.settingsSchema), "json"))) : null);
  };
  render(await api("GET", path));
  return panel;
}

/** The thread's Settings tab. */
export async function showSettings(body, ctx) {
  clear(body, h("div", {style: "overflow:auto;padding:12px 0"},
    await settingsPanel(ctx.agency, ctx.thread.agentType)));
}
