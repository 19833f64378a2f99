// calc's Python, started for a page: a PyScript worker on the vendored Pyodide running
// calculator/calc_worker.py, which the page calls as `worker.sync.call(operation, json)`.
// Shared by the calculator and the formula reference.
//
// Failures come back as one sentence naming what failed (a missing file, no WebAssembly, Python
// not starting), for the page to show next to the numbers it already has.
//
// `keepCalcPython` keeps it running: Pyodide dies for good on some failures (a stack overflow
// in WebAssembly; every later call then says "Pyodide already fatally failed"), so a call that
// finds Python dead starts a new worker, throws PythonRestarted, and tells the page (`onRestart`),
// which computes what it shows again. Python dying a second time before it has answered
// anything is not retried (PythonStopped).
//
// The documentation's live parts (a walkthrough's examples, the GPU comparison) `ask` through
// the same keeper, started on their first question, once for the page; a start that failed is
// tried again on the next question (a network that came back).

const RUNTIME_FILES = ["vendor/pyscript/core.js", "vendor/pyodide/pyodide.mjs",
  "vendor/pyodide/pyodide.asm.wasm", "vendor/pyodide/python_stdlib.zip",
  "vendor/pyodide/pyodide-lock.json", "assets/pyodide_start.mjs", "calculator/calc_worker.py"];
const SLOW_MS = 30000;

export class StartError extends Error {}

// Failed imports of PyScript so far: a browser may keep a module that failed to load as failed
// for the page (Debian's Chromium 150 does), so a start after one asks for it under another URL.
let failedImports = 0;

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
  const url = new URL("vendor/pyscript/core.js", base);
  if (failedImports) url.search = `retry=${failedImports}`;
  try {
    core = await import(url.href);
  } catch (e) {
    failedImports += 1;
    throw new StartError(await diagnose(base, `PyScript did not load: ${e.message}`));
  }
  // Evaluating PyScript is one long task of its own; starting the worker is another.
  await new Promise((resolve) => setTimeout(resolve, 0));
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

// The call was lost with a worker that died; a new one is running and the page was told.
export class PythonRestarted extends Error {}
// Python died again right after a restart: the page stops asking.
export class PythonStopped extends Error {}

const firstLine = (e) => String(e?.message ?? e).split("\n")[0];

// Does the worker still answer? (An exception raised inside Python leaves it answering.)
async function responds(worker) {
  try {
    await Promise.race([worker.sync.call("", "{}"), new Promise((_, no) => setTimeout(no, 10000))]);
    return true;
  } catch {
    return false;
  }
}

class CalcPython {
  constructor(root, { onSlow = () => {}, onRestart = () => {} } = {}) {
    Object.assign(this, { root, onSlow, onRestart, worker: null, starting: null, restarting: null,
      deaths: 0, stopped: null });
  }

  // The worker, started once; a start that failed (StartError) is tried again by the next call.
  start() {
    this.starting ??= startCalcPython(this.root, this.onSlow).then(
      (worker) => { this.worker = worker; },
      (e) => { this.starting = null; throw e; });
    return this.starting;
  }

  // calc_worker's answer (JSON text) to operation `name` on `request` (JSON text); with
  // `scenarioText`, the request's scenario is that text, read by calc as the CLI reads a file.
  async call(name, request, scenarioText = null) {
    if (!this.worker) await this.start();
    if (this.restarting) await this.restarting;
    if (this.stopped) throw this.stopped;
    const worker = this.worker;
    try {
      const answer = await (scenarioText === null ? worker.sync.call(name, request)
        : worker.sync.call_scenario_text(name, request, scenarioText));
      this.deaths = 0;
      return answer;
    } catch (error) {
      if (worker === this.worker && !this.restarting && (await responds(worker))) throw error;
      if (worker === this.worker && !this.restarting) {
        this.restarting = this.restart(firstLine(error)).finally(() => { this.restarting = null; });
      }
      await this.restarting;
      if (this.stopped) throw this.stopped;
      throw new PythonRestarted(`Python was restarted (${firstLine(error)})`);
    }
  }

  async restart(why) {
    try { this.worker.terminate?.(); } catch { /* already gone */ }
    if (++this.deaths > 1) {
      this.stopped = new PythonStopped(`Python failed again after a restart (${why})`);
      return;
    }
    try {
      this.worker = await startCalcPython(this.root);
    } catch (e) {
      this.stopped = new PythonStopped(`Python failed (${why}) and could not be restarted: ${e.message}`);
      return;
    }
    this.onRestart(why);
  }
}

// startCalcPython's worker, restarted when it dies: `(await keepCalcPython(root, ...)).call(...)`.
export async function keepCalcPython(root, options = {}) {
  const python = new CalcPython(root, options);
  await python.start();
  return python;
}

// ---- the documentation's live parts ----
const SITE_ROOT = new URL("..", import.meta.url).href; // this file is assets/
const slowListeners = new Set();
let onDemand = null;

// `listener(sentence)` is told when `ask`'s Python has not started after 30 s, and why.
export const whenSlow = (listener) => slowListeners.add(listener);

// calc's answer to operation `name` (parsed); `scenarioText`: the request's scenario as text.
// Python starts on the first question. Where it died on the way, the keeper has started it again
// and the question is asked once more, as the calculator computes its form again (onRestart).
export async function ask(name, request, scenarioText = null) {
  onDemand ??= new CalcPython(SITE_ROOT, { onSlow: (why) => slowListeners.forEach((f) => f(why)) });
  const text = JSON.stringify(request);
  try {
    return JSON.parse(await onDemand.call(name, text, scenarioText));
  } catch (e) {
    if (!(e instanceof PythonRestarted)) throw e;
    return JSON.parse(await onDemand.call(name, text, scenarioText));
  }
}

// Is `ask`'s Python running (false before the first question, or after a failed start)?
export const pythonRunning = () => Boolean(onDemand?.worker);

// A sentence for what stopped a live part, for the page's status line.
export function stopped(e) {
  if (e instanceof StartError) return `Python could not start: ${e.message}. The next change tries again.`;
  return `The live computation stopped: ${e?.message ?? e}.`;
}
