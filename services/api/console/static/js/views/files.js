// The files tab: the thread's files; markdown rendered, code with line numbers and colours.

import {clear, h} from "../dom.js";
import {codeWithLines, languageOf, markdown} from "../markdown.js";

export function showFiles(body, ctx) {
  const list = h("div.files-list.card");
  const preview = h("div.preview#preview");
  let selected = null;
  const render = (view) => {
    const files = view.state.files || {};
    const names = Object.keys(files).sort();
    if (!selected || !(selected in files)) selected = names.find((n) => /\.md$/i.test(n)) || names[0] || null;
    clear(list, h("h2", {style: "margin-top:0"}, `Files (${names.length})`),
      names.length ? names.map((name) => h("a", {href: "#", class: name === selected ? "on" : "", title: name,
        onclick: (e) => { e.preventDefault(); selected = name; render(ctx.state); }}, name)) : h("div.muted", "No files."));
    if (!selected) return clear(preview, h("div.empty", "The agent has written no file yet."));
    const text = files[selected];
    const isMarkdown = /\.(md|markdown)$/i.test(selected);
    clear(preview, h("div.row", {style: "margin-bottom:10px"}, h("b.mono", selected),
      h("span.muted", `${text.split("\n").length} lines · ${text.length} chars`)),
    isMarkdown ? markdown(text) : codeWithLines(text, languageOf(selected)));
  };
  clear(body, h("div.view", list, preview));
  render(ctx.state);
  return ctx.onState(render);
}
