// Compile the shipped wheels' Python sources with the vendored Pyodide itself (see bytecode.py).
//
//     node tools/bytecode.mjs DIR WHEEL...     # wheels in DIR, rewritten in place
//
// The bytecode format changes between Python versions, so it has to come from the very
// interpreter the browser runs: this loads Pyodide from node_modules (the copy that
// tools/vendor_assets.py vendors), installs the wheels, imports all of calc and runs an estimate
// to learn which modules the calculator loads, then rewrites each wheel with their bytecode.

import { loadPyodide } from "pyodide";
import { dirname, resolve } from "node:path";
import { fileURLToPath } from "node:url";

const [dir, ...wheels] = process.argv.slice(2);
if (!dir || !wheels.length) {
  console.error("usage: node tools/bytecode.mjs DIR WHEEL...");
  process.exit(2);
}
const py = await loadPyodide();
await py.loadPackage(wheels.map((w) => resolve(dir, w)), { messageCallback: () => {} });
py.mountNodeFS("/wheels", resolve(dir));
py.mountNodeFS("/tools", dirname(fileURLToPath(import.meta.url)));
py.globals.set("wheels", py.toPy(wheels));
py.runPython(`
import importlib, os, sys
from pathlib import Path
sys.path.insert(0, "/tools")
from bytecode import add_bytecode, imported_sources

os.environ["PYDANTIC_DISABLE_PLUGINS"] = "__all__"  # as the site's worker does
site = Path(importlib.import_module("calc").__file__).parent.parent  # site-packages
used = imported_sources(site, "calc", "import calc; calc.estimate({'model': 'llama-3.1-8b'})")
for name in wheels:
    n = add_bytecode(Path("/wheels") / name, used)
    print(f"bytecode: {name}: {n} modules compiled for {sys.implementation.cache_tag}")
`);
