// Markdown rendered safely, and code with line numbers and highlighting.

import DOMPurify from "../vendor/dompurify/purify.es.js";
import hljs from "../vendor/highlight/highlight.min.js";
import {marked} from "../vendor/marked/marked.esm.js";
import {h} from "./dom.js";

marked.setOptions({gfm: true, breaks: false});

/** Markdown → a sanitised element, code blocks highlighted. */
export function markdown(text) {
  const node = h("div.md");
  node.innerHTML = DOMPurify.sanitize(marked.parse(text || ""));
  for (const block of node.querySelectorAll("pre code")) hljs.highlightElement(block);
  return node;
}

const LANGUAGES = {py: "python", js: "javascript", mjs: "javascript", ts: "typescript", json: "json",
  sh: "bash", yml: "yaml", yaml: "yaml", toml: "ini", sql: "sql", html: "xml", xml: "xml",
  css: "css", go: "go", rs: "rust", java: "java", c: "c", h: "c", cpp: "cpp", rb: "ruby",
  md: "markdown", txt: "plaintext"};

export function languageOf(path) {
  const ext = (path.split(".").pop() || "").toLowerCase();
  return LANGUAGES[ext] || null;
}

/** Text highlighted as `language` (or guessed), as a <pre><code>. */
export function highlight(text, language) {
  const code = h("code.hljs");
  code.innerHTML = language && hljs.getLanguage(language)
    ? hljs.highlight(text, {language}).value
    : hljs.highlightAuto(text).value;
  return h("pre", code);
}

/** Code with line numbers: one table row per line, highlighting kept per line. */
export function codeWithLines(text, language) {
  const html = language && hljs.getLanguage(language)
    ? hljs.highlight(text, {language}).value
    : hljs.highlightAuto(text).value;
  const lines = splitHighlighted(html);
  const table = h("table.code.hljs");
  lines.forEach((line, i) => {
    const src = h("td.src");
    src.innerHTML = line || " ";
    table.append(h("tr", h("td.ln", String(i + 1)), src));
  });
  return table;
}

/** Split highlighted HTML into lines, closing and reopening spans across line ends. */
function splitHighlighted(html) {
  const lines = [];
  const open = [];
  let current = "";
  const re = /(<span[^>]*>)|(<\/span>)|(\n)|([^<\n]+|<)/g;
  let m;
  while ((m = re.exec(html))) {
    if (m[1]) { open.push(m[1]); current += m[1]; }
    else if (m[2]) { open.pop(); current += m[2]; }
    else if (m[3]) {
      lines.push(current + "</span>".repeat(open.length));
      current = open.join("");
    } else current += m[4];
  }
  lines.push(current + "</span>".repeat(open.length));
  return lines;
}
