// calc's Python, started for a page: a PyScript worker on the vendored Pyodide running
// calculator/calc_worker.py, which the page calls as `worker.sync.call(operation, json)`.
// Shared by the calculator and the formula reference.
//
// Failures come back as one sentence naming what failed (a missing file, no WebAssembly, Python
// not starting), for the page to show next to the numbers it already has.

const RUNTIME_FILES = ["vendor/pyscript/core.js", "vendor/pyodide/pyodide.mjs",
  "vendor/pyodide/pyodide.asm.wasm", "vendor/pyodide/python_stdlib.zip",
  "vendor/pyodide/pyodide-lock.json", "assets/pyodide_start.mjs", "calculator/calc_worker.py"];
const SLOW_MS = 30000;

export class StartError extends Error {}

// Which of the runtime's files cannot be fetched, as one sentence (or `reason` if all can).
async function diagnose(root, reason) {
  const missing = [];
  await Promise.all(RUNTIME_FILES.map(async (f) => {
    try { if (!(await fetch(new URL(f, root), { method: "HEAD" })).ok) missing.push(f); } catch { missing.push(f); }
  }));
  return missing.length ? `these files could not be loaded: ${missing.join(", ")}` : reason;
}

// The worker, once Python is running. `root` is the site root (relative URLs resolve against the
// page); `onSlow(sentence)` is called if Python has not started after 30 s. Throws StartError.
export async function startCalcPython(root, onSlow = () => {}) {
  const base = new URL(root, location.href);
  if (typeof WebAssembly !== "object") throw new StartError("this browser has no WebAssembly");
  let core;
  try {
    core = await import(new URL("vendor/pyscript/core.js", base).href);
  } catch (e) {
    throw new StartError(await diagnose(base, `PyScript did not load: ${e.message}`));
  }
  // PyScript hands the JavaScript hooks that run in a worker over as source it compiles with
  // Function(), which the Content-Security-Policy forbids (no 'unsafe-eval'). calc's worker needs
  // none: the one PyScript adds registers pyscript.fs, which calc does not use, and the first
  // worker of a page starts without it. So every worker starts without them (a restart too).
  for (const name of ["onReady", "onBeforeRun", "onBeforeRunAsync", "onAfterRun", "onAfterRunAsync"]) {
    core.hooks?.worker?.[name]?.clear?.();
  }
  const slow = setTimeout(async () => onSlow(
    await diagnose(base, "Python has not started after 30 seconds; still trying")), SLOW_MS);
  try {
    // Pyodide, through assets/pyodide_start.mjs: it restores a start-up snapshot when there is one.
    return await core.PyWorker(new URL("calculator/calc_worker.py", base).href, {
      version: new URL("assets/pyodide_start.mjs", base).href, // a worker's interpreter URL
      config: {
        packages: ["trainmem-calc"],
        packages_cache: "passthrough", // install from our pyodide-lock.json: no micropip, no index
      },
    });
  } catch (e) {
    throw new StartError(await diagnose(base, `Python did not start: ${e?.message ?? e}`));
  } finally {
    clearTimeout(slow);
  }
}
