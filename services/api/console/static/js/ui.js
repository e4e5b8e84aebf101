// Page-wide feedback and navigation, for every view.

export function flash(text, isError = false) {
  const node = document.getElementById("flash");
  node.textContent = text || "";
  node.className = isError ? "error" : "";
  if (text && !isError) setTimeout(() => { if (node.textContent === text) node.textContent = ""; }, 4000);
}

export function go(hash) {
  if (location.hash === hash) window.dispatchEvent(new HashChangeEvent("hashchange"));
  else location.hash = hash;
}
