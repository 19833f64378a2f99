// Pyodide, started from a memory snapshot when this browser has one.
//
// PyScript imports the module named by a PyWorker's `version` option and calls its
// `loadPyodide`; this module is that module. Starting the interpreter is most of the time to the
// first live result (measured: about 2.3 s of a 3.4 s repeat visit on a 2-core machine, with
// every file already cached), and almost all of it is CPython initialising itself, which is the
// same every time. So the first start in a browser passes Pyodide's `_makeSnapshot` option, takes
// a copy of the interpreter's memory right after it has initialised (before any package is
// installed: package files live outside that memory), and keeps it in Cache Storage. Later
// starts hand that copy to `_loadSnapshot`, which restores it instead of initialising (about
// 0.4 s), then install the packages as usual.
//
// The snapshot is only ever restored by the Pyodide build that made it (Pyodide checks its build
// id and throws otherwise); any failure to read, restore or check it deletes it and starts
// normally, so the worst case is the ordinary start. Both options are underscore-prefixed, i.e.
// experimental in Pyodide 314: the e2e tests cover both paths.

import { loadPyodide as loadFresh, version } from "../vendor/pyodide/pyodide.mjs";

export { version };

const INDEX_URL = new URL("../vendor/pyodide/", import.meta.url).href;
const CACHE = "trainmem-pyodide-snapshot"; // not "trainmem-site-": the service worker leaves it be
const KEY = new URL(`snapshot-${version}.bin`, INDEX_URL).href;

async function readSnapshot() {
  try {
    const response = await (await caches.open(CACHE)).match(KEY);
    return response ? new Uint8Array(await response.arrayBuffer()) : null;
  } catch {
    return null; // no Cache Storage (an insecure context): start normally
  }
}

async function saveSnapshot(bytes) {
  try {
    await (await caches.open(CACHE)).put(KEY, new Response(bytes, {
      headers: { "content-type": "application/octet-stream" },
    }));
  } catch (e) {
    console.info(`pyodide: the start-up snapshot was not saved (${e?.message ?? e})`);
  }
}

async function forgetSnapshot() {
  try { await caches.delete(CACHE); } catch { /* nothing to forget */ }
}

export async function loadPyodide(options = {}) {
  const { packages = [], ...rest } = options;
  const config = { ...rest, indexURL: INDEX_URL };
  const t0 = performance.now();
  const snapshot = await readSnapshot();
  if (snapshot) {
    try {
      const py = await loadFresh({ ...config, _loadSnapshot: snapshot });
      if (py.runPython("6 * 7") !== 42) throw new Error("the restored interpreter does not compute");
      console.info(`pyodide: started from the saved snapshot in ${Math.round(performance.now() - t0)} ms`);
      await py.loadPackage(packages);
      return py;
    } catch (e) {
      console.info(`pyodide: the saved snapshot could not be used (${e?.message ?? e}); starting afresh`);
      await forgetSnapshot();
    }
  }
  const py = await loadFresh({ ...config, _makeSnapshot: true });
  console.info(`pyodide: started afresh in ${Math.round(performance.now() - t0)} ms`);
  let copy = null;
  try {
    copy = py.makeMemorySnapshot();
  } catch (e) {
    console.info(`pyodide: no start-up snapshot (${e?.message ?? e})`);
  }
  const installed = py.loadPackage(packages);
  if (copy) await saveSnapshot(copy);
  await installed;
  return py;
}
