// Pyodide, started from the memory snapshot the site ships.
//
// PyScript imports the module named by a PyWorker's `version` option and calls its
// `loadPyodide`; this module is that module. Starting the interpreter is most of the time to the
// first live result (about 2.2 s of a 3.6 s cold visit on a 2-core machine), and almost all of it
// is CPython initialising itself, the same every time. So the build (tools/snapshot.mjs) starts
// the vendored Pyodide under Node, takes a copy of the interpreter's memory right after it has
// initialised (with the standard-library modules the calculator's start imports), and ships it
// gzip-compressed next to the runtime, named in vendor/pyodide/snapshot.json. Every visit, the
// first one too, hands it to Pyodide's `_loadSnapshot`, which restores it instead of
// initialising (about 0.3 s), then installs the packages as usual. The snapshot is fetched while
// Pyodide fetches and compiles its wasm, and is decompressed as it arrives, here, in the worker,
// never on the page's main thread.
//
// The snapshot is only restored by the runtime it was made from: snapshot.json must name this
// Pyodide version, and Pyodide checks its own build id in the snapshot's header and throws
// otherwise. Anything wrong (no manifest, another version, a damaged file, a failed restore) is
// said on the console and Python starts normally, so the worst case is the ordinary start. Both
// options are underscore-prefixed, i.e. experimental in Pyodide 314: the e2e tests cover both
// paths (tests/e2e/test_snapshot.py).

import { loadPyodide as loadFresh, version } from "../vendor/pyodide/pyodide.mjs";

export { version };

const INDEX_URL = new URL("../vendor/pyodide/", import.meta.url).href;
const GZIP_MAGIC = [0x1f, 0x8b];
const OLD_CACHE = "trainmem-pyodide-snapshot"; // where browsers kept a snapshot they made: unused now

async function fetchOk(url) {
  const response = await fetch(url, { credentials: "same-origin" });
  if (!response.ok) throw new Error(`${url}: HTTP ${response.status}`);
  return response;
}

// The shipped snapshot's bytes, uncompressed, decompressed as they arrive (a host that sent the
// file with `Content-Encoding: gzip` has had the browser do it already: then they are used as
// they came). Decompressing only after the whole download took about 0.2 s after it on a 2-core
// machine, and the restore waited for it: the interpreter was up 0.68-0.80 s after loadPyodide
// was called, 0.62-0.71 s with decompression as the bytes arrive (3 cold visits each).
async function shippedSnapshot() {
  const manifest = await (await fetchOk(new URL("snapshot.json", INDEX_URL))).json();
  if (manifest.pyodide !== version) {
    throw new Error(`it was made for Pyodide ${manifest.pyodide}, this is ${version}`);
  }
  const body = (await fetchOk(new URL(manifest.file, INDEX_URL))).body;
  const [head, stream] = await peek(body, GZIP_MAGIC.length);
  const gzipped = GZIP_MAGIC.every((byte, i) => head[i] === byte);
  const bytes = new Uint8Array(manifest.bytes);
  const reader = (gzipped ? stream.pipeThrough(new DecompressionStream("gzip")) : stream).getReader();
  let filled = 0;
  for (let read = await reader.read(); !read.done; read = await reader.read()) {
    if (filled + read.value.length > bytes.length) {
      await reader.cancel();
      throw new Error(`${manifest.file} is longer than the manifest says (${manifest.bytes} bytes)`);
    }
    bytes.set(read.value, filled);
    filled += read.value.length;
  }
  if (filled !== bytes.length) {
    throw new Error(`${manifest.file} has ${filled} bytes, the manifest says ${manifest.bytes}`);
  }
  return bytes;
}

// The first `n` bytes of `body` (fewer if it is shorter), and a stream of all of it.
async function peek(body, n) {
  const reader = body.getReader();
  const read = [];
  let length = 0;
  while (length < n) {
    const { done, value } = await reader.read();
    if (done) break;
    read.push(value);
    length += value.length;
  }
  const head = new Uint8Array(length);
  read.reduce((at, chunk) => (head.set(chunk, at), at + chunk.length), 0);
  const stream = new ReadableStream({
    start(controller) { if (length) controller.enqueue(head); },
    async pull(controller) {
      const { done, value } = await reader.read();
      if (done) controller.close(); else controller.enqueue(value);
    },
    cancel(reason) { return reader.cancel(reason); },
  });
  return [head.subarray(0, n), stream];
}

export async function loadPyodide(options = {}) {
  const { packages = [], ...rest } = options;
  const config = { ...rest, indexURL: INDEX_URL };
  const t0 = performance.now();
  globalThis.caches?.delete(OLD_CACHE).catch(() => {});
  const snapshot = shippedSnapshot();
  snapshot.catch(() => {}); // its failure is reported below, where loadFresh awaits it
  let py;
  try {
    py = await loadFresh({ ...config, _loadSnapshot: snapshot });
    // Every visitor restores the same memory: reseed `random`, which Python seeded at start-up.
    if (py.runPython("import random; random.seed(); 6 * 7") !== 42) {
      throw new Error("the restored interpreter does not compute");
    }
    console.info(`pyodide: started from the shipped snapshot in ${Math.round(performance.now() - t0)} ms`);
  } catch (e) {
    console.info(`pyodide: the shipped snapshot could not be used (${e?.message ?? e}); starting afresh`);
    py = await loadFresh(config);
    console.info(`pyodide: started afresh in ${Math.round(performance.now() - t0)} ms`);
  }
  await py.loadPackage(packages);
  return py;
}
