// Small DOM helpers shared by every view.

/** h("div.card#id", {onclick}, child, ...) → an element; strings become text nodes. */
export function h(tag, attrs, ...children) {
  const [name, ...rest] = tag.split(/(?=[.#])/);
  const node = document.createElement(name || "div");
  for (const part of rest) {
    if (part[0] === ".") node.classList.add(part.slice(1));
    else node.id = part.slice(1);
  }
  const isChild = typeof attrs !== "object" || attrs instanceof Node || Array.isArray(attrs);
  if (attrs !== undefined && attrs !== null && isChild) {
    children.unshift(attrs);
    attrs = null;
  }
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === undefined || value === null || value === false) continue;
    if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
    else if (key === "class") node.className = value;
    else if (key === "style") node.style.cssText = value;
    else if (key in node && typeof value !== "string") node[key] = value;
    else node.setAttribute(key, value === true ? "" : value);
  }
  append(node, children);
  return node;
}

function append(node, children) {
  for (const child of children.flat(Infinity)) {
    if (child === undefined || child === null || child === false) continue;
    node.append(child instanceof Node ? child : String(child));
  }
}

export function clear(node, ...children) {
  node.replaceChildren();
  append(node, children);
  return node;
}

export function badge(status, text) {
  return h(`span.badge.${status || "idle"}`, text || status || "idle");
}

export function shortId(id) {
  return id ? "…" + id.slice(-8) : "";
}

export function time(ts) {
  if (!ts) return "";
  const d = new Date(ts);
  return d.toLocaleTimeString([], {hour12: false}) + "." + String(d.getMilliseconds()).padStart(3, "0");
}

export function when(ts) {
  return ts ? new Date(ts).toLocaleString([], {hour12: false}) : "";
}

export function num(n) {
  return (n || 0).toLocaleString();
}

export function usd(n) {
  return "$" + (n || 0).toFixed(n >= 1 ? 2 : 4);
}

export function json(value) {
  return JSON.stringify(value, null, 2);
}

/** Run `fn` at most once per `ms`, the last call winning. */
export function debounce(fn, ms) {
  let timer = null;
  return (...args) => {
    clearTimeout(timer);
    timer = setTimeout(() => fn(...args), ms);
  };
}

/** Offer `data` as a file download. */
export function download(name, data, type) {
  const blob = data instanceof Blob ? data : new Blob([data], {type});
  const url = URL.createObjectURL(blob);
  const a = h("a", {href: url, download: name});
  document.body.append(a);
  a.click();
  a.remove();
  setTimeout(() => URL.revokeObjectURL(url), 1000);
}
