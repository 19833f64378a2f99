// The site's search worker: Material for MkDocs' own, started on the first query with text.
//
// Material starts its search worker on every page load and sends it the whole search index
// (search/search_index.json), which its worker turns into a lunr index at once: 0.1-0.6 s of a
// CPU core on every page view, whether or not anyone searches. On the calculator's first visit
// that build ran while Python was starting, and on a 2-core machine it stretched the page's own
// main-thread tasks past 50 ms (issue 13). The site points Material at this worker instead
// (tools/site_scripts.py rewrites each page's __config); it keeps the index Material sent and
// hands it to Material's worker, started in a worker of its own, when the first query with text
// comes, so the first search waits for the build and no page view pays for it otherwise.
//
// Material's messages (src/templates/assets/javascripts/integrations/search/worker/message):
// SETUP {config, docs, options} -> READY; QUERY (the text) -> RESULT {items, ...}. Material asks
// nothing before READY, so READY is said at once; a query with no text, which Material sends as
// soon as it is ready, gets what Material's worker answers to it ({items: []}) without a build.

const MATERIAL_WORKER = /*MATERIAL WORKER*/ null /*END MATERIAL WORKER*/; // tools/site_scripts.py
const [SETUP, READY, QUERY, RESULT] = [0, 1, 2, 3];

let setup = null; // Material's SETUP, kept until its worker has built the index
let material = null; // Material's worker, once a query needs it
let built = false;
let waiting = null; // the latest query asked while the index builds (earlier ones are stale)

addEventListener("message", ({ data }) => {
  if (data.type === SETUP) {
    setup = data;
    postMessage({ type: READY });
  } else if (data.type === QUERY) {
    if (!material && !String(data.data).trim()) return postMessage({ type: RESULT, data: { items: [] } });
    material ??= start();
    if (built) material.postMessage(data);
    else waiting = data;
  }
});

function start() {
  const worker = new Worker(new URL(MATERIAL_WORKER, location.href));
  worker.addEventListener("message", ({ data }) => {
    if (data.type !== READY) return postMessage(data);
    built = true;
    setup = null;
    if (waiting) worker.postMessage(waiting);
    waiting = null;
  });
  worker.postMessage(setup);
  return worker;
}
