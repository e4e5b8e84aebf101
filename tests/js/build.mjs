// Bundles a page from npm packages with esbuild: node build.mjs ENTRY OUTDIR
// writes OUTDIR/index.html and OUTDIR/app.js (React in its production build). As Vite
// does, the environment's VITE_* variables are the page's `import.meta.env.VITE_*`.
import { build } from "esbuild";
import { writeFileSync } from "node:fs";
import { join } from "node:path";

const [entry, out] = process.argv.slice(2);
await build({
  entryPoints: [entry],
  bundle: true,
  format: "esm",
  jsx: "automatic",
  target: "es2022",
  outfile: join(out, "app.js"),
  define: {
    "process.env.NODE_ENV": '"production"',
    ...Object.fromEntries(
      Object.entries(process.env)
        .filter(([name]) => name.startsWith("VITE_"))
        .map(([name, value]) => [`import.meta.env.${name}`, JSON.stringify(value)]),
    ),
  },
  minify: true,
  logLevel: "warning",
});
writeFileSync(
  join(out, "index.html"),
  '<!doctype html><meta charset="utf-8"><title>chat</title>' +
    '<div id="root"></div><script type="module" src="app.js"></script>\n',
);
