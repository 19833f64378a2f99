// Make the start-up memory snapshot the site ships next to the vendored Pyodide.
//
//     node tools/snapshot.mjs DIR      # DIR: the vendored pyodide/ (tools/vendor_assets.py's)
//
// Starting Pyodide is mostly CPython initialising itself, the same work on every visit: about
// 2.2 s of a 3.6 s cold first live result on a 2-core machine. This starts the very files in DIR
// under Node with `_makeSnapshot`, copies the interpreter's memory right after it has
// initialised, and writes it gzip-compressed as DIR/snapshot-KEY.bin.gz, with DIR/snapshot.json
// naming it; site/assets/pyodide_start.mjs restores it with `_loadSnapshot` (about 0.3 s).
//
// What it holds: the initialised interpreter only, not pydantic or calc. Pyodide 314's
// snapshots are wasm memory and nothing else: a package's files live in the JavaScript side of
// the file system, and pydantic_core's compiled module (a dynamic library with its own code and
// function table entries) is not in the memory at all, so a snapshot taken after importing calc
// cannot be restored (and makeMemorySnapshot refuses it: "Unexpected hiwire entry"). Importing
// the few standard-library modules calc adds was measured too: about 0.1 s saved, 0.8 MB more to
// download; not worth it.
//
// KEY is a hash of the runtime files the snapshot depends on (the wasm, its loader, the standard
// library); Pyodide itself refuses a snapshot from another build (its build id is in the
// header), and pyodide_start.mjs also checks the manifest's Pyodide version, so a stale copy in
// some cache is never restored into another runtime.

import { createHash } from "node:crypto";
import { readFileSync, readdirSync, rmSync, writeFileSync } from "node:fs";
import { resolve } from "node:path";
import { pathToFileURL } from "node:url";
import { gzipSync } from "node:zlib";

const RUNTIME = ["pyodide.mjs", "pyodide.asm.mjs", "pyodide.asm.wasm", "python_stdlib.zip"];

const [dir] = process.argv.slice(2);
if (!dir) {
  console.error("usage: node tools/snapshot.mjs DIR");
  process.exit(2);
}
const root = resolve(dir);
const hash = createHash("sha256");
for (const name of RUNTIME) hash.update(name).update(readFileSync(resolve(root, name)));
const key = hash.digest("hex").slice(0, 16);

const { loadPyodide, version } = await import(pathToFileURL(resolve(root, "pyodide.mjs")).href);
const py = await loadPyodide({ indexURL: `${root}/`, _makeSnapshot: true });
if (py.runPython("6 * 7") !== 42) throw new Error("the interpreter to snapshot does not compute");
const raw = py.makeMemorySnapshot();
const packed = gzipSync(raw, { level: 9 });
for (const old of readdirSync(root).filter((f) => /^snapshot-.*\.bin\.gz$/.test(f))) rmSync(resolve(root, old));
const file = `snapshot-${key}.bin.gz`;
writeFileSync(resolve(root, file), packed);
writeFileSync(resolve(root, "snapshot.json"), JSON.stringify(
  { pyodide: version, key, file, bytes: raw.length, gzip_bytes: packed.length }, null, 1) + "\n");
console.log(`snapshot: ${file}, ${(raw.length / 2 ** 20).toFixed(1)} MiB in memory, `
  + `${(packed.length / 2 ** 20).toFixed(1)} MiB gzip, for Pyodide ${version}`);
