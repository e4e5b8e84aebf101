// A Cytoscape graph as a standalone SVG document: nodes, edges, arrows and labels drawn
// from the rendered positions and styles (enough for the console's graph, not all of CSS).

const esc = (s) => String(s).replace(/[&<>"]/g, (c) => ({"&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;"})[c]);

function shape(node) {
  const {x, y} = node.position();
  const w = node.width(), hgt = node.height();
  const fill = node.style("background-color");
  switch (node.style("shape")) {
    case "ellipse":
      return `<ellipse cx="${x}" cy="${y}" rx="${w / 2}" ry="${hgt / 2}" fill="${fill}"/>`;
    case "diamond":
      return `<polygon points="${x},${y - hgt / 2} ${x + w / 2},${y} ${x},${y + hgt / 2} ${x - w / 2},${y}" fill="${fill}"/>`;
    default:
      return `<rect x="${x - w / 2}" y="${y - hgt / 2}" width="${w}" height="${hgt}" rx="6" fill="${fill}"/>`;
  }
}

function edge(e) {
  const s = e.sourceEndpoint(), t = e.targetEndpoint();
  const color = e.style("line-color");
  const dash = e.style("line-style") === "dashed" ? ' stroke-dasharray="6 4"' : "";
  const id = `a${color.replace(/[^a-z0-9]/gi, "")}`;
  let out = `<line x1="${s.x}" y1="${s.y}" x2="${t.x}" y2="${t.y}" stroke="${color}" stroke-width="${parseFloat(e.style("width"))}"${dash} marker-end="url(#${id})"/>`;
  const label = e.data("label");
  if (label) {
    out += `<text x="${(s.x + t.x) / 2}" y="${(s.y + t.y) / 2 - 4}" fill="${color}" font-size="10" text-anchor="middle">${esc(label)}</text>`;
  }
  return [out, id, color];
}

export function toSvg(cy) {
  const box = cy.elements().boundingBox();
  const pad = 20;
  const markers = new Map();
  const edges = cy.edges().map((e) => {
    const [svg, id, color] = edge(e);
    markers.set(id, color);
    return svg;
  });
  const nodes = cy.nodes().map((n) => {
    const {x, y} = n.position();
    return `${shape(n)}<text x="${x}" y="${y + 4}" fill="${n.style("color")}" font-size="11" text-anchor="middle"${n.data("kind") === "thread" ? ' font-weight="bold"' : ""}>${esc(n.data("label"))}</text>`;
  });
  const defs = [...markers].map(([id, color]) =>
    `<marker id="${id}" viewBox="0 0 10 10" refX="10" refY="5" markerWidth="7" markerHeight="7" orient="auto-start-reverse"><path d="M0,0 L10,5 L0,10 z" fill="${color}"/></marker>`);
  return `<?xml version="1.0" encoding="UTF-8"?>
<svg xmlns="http://www.w3.org/2000/svg" viewBox="${box.x1 - pad} ${box.y1 - pad} ${box.w + 2 * pad} ${box.h + 2 * pad}" width="${box.w + 2 * pad}" height="${box.h + 2 * pad}" font-family="system-ui, sans-serif">
<defs>${defs.join("")}</defs>
<rect x="${box.x1 - pad}" y="${box.y1 - pad}" width="${box.w + 2 * pad}" height="${box.h + 2 * pad}" fill="#fff"/>
${edges.join("\n")}
${nodes.join("\n")}
</svg>
`;
}
