// Make the start-up memory snapshot the site ships next to the vendored Pyodide.
//
//     node tools/snapshot.mjs DIR WORKER   # DIR: the vendored pyodide/ (tools/vendor_assets.py's)
//                                          # WORKER: the site's worker, calculator/calc_worker.py
//
// Starting Pyodide is mostly CPython initialising itself, the same work on every visit: about
// 2.2 s of a 3.6 s cold first live result on a 2-core machine. This starts the very files in DIR
// under Node with `_makeSnapshot`, copies the interpreter's memory right after it has
// initialised, and writes it gzip-compressed as DIR/snapshot-KEY.bin.gz, with DIR/snapshot.json
// naming it; site/assets/pyodide_start.mjs restores it with `_loadSnapshot` (about 0.3 s).
//
// What it holds: the initialised interpreter, and the standard-library modules the calculator's
// start imports (measured, see below), not pydantic or calc. Pyodide 314's snapshots are wasm
// memory and nothing else: a package's files live in the JavaScript side of the file system, and
// pydantic_core's compiled module (a dynamic library with its own code and function table
// entries) is not in the memory at all, so a snapshot taken after importing calc cannot be
// restored (and makeMemorySnapshot refuses it: "Unexpected hiwire entry"). The standard library
// is different: its modules are plain Python objects in that memory, and the stdlib zip they
// came from is part of KEY. The Pyodide npm package ships that zip as sources, so every module
// imported after start-up is compiled on the visitor's machine: Pyodide's package loader alone
// imports tarfile, email and importlib.metadata on its first use. So this first starts the same
// runtime normally, installs the shipped wheels from DIR's lock file, runs WORKER and has it
// compute one estimate, as the site does; every standard-library module that brought in (26
// with calc today) is then imported into the interpreter the snapshot is taken of. Measured
// under Node, restore + install + import calc + one estimate, interleaved, 5 runs each: 1.89-2.20
// s before, 1.52-1.68 s after (installing the wheels 0.76-0.89 -> 0.41-0.53 s); the snapshot is
// 0.4 MB larger gzip-compressed.
//
// KEY is a hash of the runtime files the snapshot depends on (the wasm, its loader, the standard
// library) and of the modules imported into it; Pyodide itself refuses a snapshot from another
// build (its build id is in the header), and pyodide_start.mjs also checks the manifest's
// Pyodide version, so a stale copy in some cache is never restored into another runtime.

import { createHash } from "node:crypto";
import { readFileSync, readdirSync, rmSync, writeFileSync } from "node:fs";
import { resolve } from "node:path";
import { pathToFileURL } from "node:url";
import { gzipSync } from "node:zlib";

const RUNTIME = ["pyodide.mjs", "pyodide.asm.mjs", "pyodide.asm.wasm", "python_stdlib.zip"];

const [dir, worker] = process.argv.slice(2);
if (!dir || !worker) {
  console.error("usage: node tools/snapshot.mjs DIR WORKER");
  process.exit(2);
}
const root = resolve(dir);

const { loadPyodide, version } = await import(pathToFileURL(resolve(root, "pyodide.mjs")).href);

// The standard-library modules (from the stdlib zip, or built in) that installing the shipped
// wheels, running the site's worker (`worker`) and its first estimate bring in after start-up,
// in the order they were first imported. Pyodide's own modules stay out: they hold JavaScript
// objects.
async function startupStdlib() {
  const probe = await loadPyodide({ indexURL: `${root}/` });
  probe.runPython("import sys; before = set(sys.modules)");
  const lock = JSON.parse(readFileSync(resolve(root, "pyodide-lock.json"), "utf8"));
  await probe.loadPackage(Object.keys(lock.packages), { messageCallback: () => {} });
  probe.globals.set("worker_source", readFileSync(worker, "utf8"));
  return JSON.parse(probe.runPython(`
import json
space = {"__name__": "calc_worker"}
exec(compile(worker_source, "calc_worker.py", "exec"), space)
space["call"]("estimate", json.dumps({"scenario": {"model": "llama-3.1-8b"}}))
def stdlib(name):
    file = getattr(sys.modules[name], "__file__", None)
    ours = file.startswith("/lib/python") and "site-packages" not in file if file \\
        else name in sys.builtin_module_names
    return ours and name.partition(".")[0] not in ("pyodide", "_pyodide", "js", "pyodide_js")
json.dumps([name for name in sys.modules if name not in before and stdlib(name)])
`));
}

const stdlib = await startupStdlib();
const hash = createHash("sha256");
for (const name of RUNTIME) hash.update(name).update(readFileSync(resolve(root, name)));
const key = hash.update(JSON.stringify(stdlib)).digest("hex").slice(0, 16);
const py = await loadPyodide({ indexURL: `${root}/`, _makeSnapshot: true });
py.runPython(`import importlib
for name in ${JSON.stringify(stdlib)}:
    importlib.import_module(name)
del importlib, name`);
if (py.runPython("6 * 7") !== 42) throw new Error("the interpreter to snapshot does not compute");
console.log(`snapshot: ${stdlib.length} standard-library modules imported into it: ${stdlib.join(" ")}`);
const raw = py.makeMemorySnapshot();
const packed = gzipSync(raw, { level: 9 });
for (const old of readdirSync(root).filter((f) => /^snapshot-.*\.bin\.gz$/.test(f))) rmSync(resolve(root, old));
const file = `snapshot-${key}.bin.gz`;
writeFileSync(resolve(root, file), packed);
writeFileSync(resolve(root, "snapshot.json"), JSON.stringify(
  { pyodide: version, key, file, bytes: raw.length, gzip_bytes: packed.length }, null, 1) + "\n");
console.log(`snapshot: ${file}, ${(raw.length / 2 ** 20).toFixed(1)} MiB in memory, `
  + `${(packed.length / 2 ** 20).toFixed(1)} MiB gzip, for Pyodide ${version}`);
