// The site's service worker: after the first visit, every page, the vendored Pyodide runtime,
// PyScript, the wheels and pyodide-lock.json come from one versioned cache, so the calculator
// works with the network gone.
//
// `make site` runs tools/precache.py after `mkdocs build`; it replaces the MANIFEST line below
// with the list of files and a content hash of them all. A new deployment therefore changes this
// file's bytes, the browser installs the new worker next to the old one, and the new worker
// waits: the page (assets/offline.js) offers "a new version is available — reload" and only
// then tells it to take over, so one page never mixes files of two deployments.
//
// Everything is relative to this file's location (the site root), so it works under a
// GitHub Pages sub-path (https://user.github.io/repo/) with no custom headers.

const MANIFEST = /*PRECACHE*/ null /*END PRECACHE*/;
const PREFIX = "trainmem-site-";
const ROOT = new URL("./", self.location.href);
const CACHE = PREFIX + (MANIFEST ? MANIFEST.version : "unbuilt");
const URLS = new Set((MANIFEST ? MANIFEST.files : []).map((f) => new URL(f, ROOT).href));

// The cache key of a request: no query, and "dir/index.html" is the page "dir/".
function key(url) {
  const u = new URL(url);
  u.search = "";
  u.hash = "";
  if (u.pathname.endsWith("/index.html")) u.pathname = u.pathname.slice(0, -"index.html".length);
  return u.href;
}

self.addEventListener("install", (event) => {
  if (!MANIFEST) return; // an unprocessed copy (mkdocs serve): stay a pass-through
  event.waitUntil((async () => {
    const cache = await caches.open(CACHE);
    // "no-cache": revalidate with the server (a 304 reuses the HTTP cache's bytes), so a new
    // deployment never precaches stale files that GitHub Pages' max-age kept in the HTTP cache.
    const queue = [...URLS];
    const fetchOne = async () => {
      for (let url = queue.shift(); url; url = queue.shift()) {
        const response = await fetch(new Request(url, { cache: "no-cache", credentials: "same-origin" }));
        if (!response.ok) throw new Error(`precache: ${url}: HTTP ${response.status}`);
        await cache.put(url, response);
      }
    };
    await Promise.all(Array.from({ length: 6 }, fetchOne));
  })());
  // No skipWaiting(): the first install activates at once anyway; an update waits for the page.
});

self.addEventListener("activate", (event) => {
  event.waitUntil((async () => {
    for (const name of await caches.keys()) {
      if (name.startsWith(PREFIX) && name !== CACHE) await caches.delete(name);
    }
  })());
});

self.addEventListener("message", (event) => {
  const data = event.data || {};
  if (data.type === "SKIP_WAITING") self.skipWaiting();
  if (data.type === "VERSION" && event.ports[0]) {
    event.ports[0].postMessage({ version: MANIFEST ? MANIFEST.version : null });
  }
});

self.addEventListener("fetch", (event) => {
  const request = event.request;
  if (request.method !== "GET" || !MANIFEST) return;
  const k = key(request.url);
  if (!URLS.has(k)) {
    // Another page of this site that is not precached: the cached 404 page when offline.
    if (request.mode === "navigate" && k.startsWith(ROOT.href)) {
      event.respondWith(fetch(request).catch(async () =>
        (await caches.match(new URL("404.html", ROOT).href, { cacheName: CACHE })) || Response.error()));
    }
    return; // not ours (or another host): the network, untouched
  }
  event.respondWith((async () => {
    const cached = await caches.match(k, { cacheName: CACHE });
    if (cached) return cached;
    // Evicted or not yet cached: the network, and keep the copy for next time.
    const response = await fetch(request);
    if (response.ok && response.type === "basic") {
      const copy = response.clone();
      event.waitUntil(caches.open(CACHE).then((c) => c.put(k, copy)));
    }
    return response;
  })());
});
