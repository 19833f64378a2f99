// Offline support, on every page: register the site's service worker (sw.js at the site root,
// scoped to the site root, so a GitHub Pages sub-path works) and say, in a small notice, when
// the page came from the saved copy, when the network is gone, and when a new deployment is
// waiting ("A new version is available — reload"), rather than mixing old and new files.
//
// The notice is <div id="offline-notice" data-state="...">, states: "saved" (first visit: the
// site is now saved for offline use), "cached" (this page came from the saved copy), "offline"
// (from the saved copy, and the site cannot be reached), "update" (a new version waits).
// It sits in the page's flow above the content, so it covers nothing. "saved" and "cached" go
// after a few seconds and are said once a visit (sessionStorage), not on every page; "offline"
// stays until closed, and once closed is not said again in the visit; "update" stays until taken.
(() => {
  if (!("serviceWorker" in navigator)) return;
  const script = document.currentScript;
  const root = new URL("../", script ? script.src : location.href); // this file is <root>/assets/
  const sw = navigator.serviceWorker;
  const state = (window.siteOffline = { root: root.href, controlled: Boolean(sw.controller), version: null });
  let notice = null;
  let reloading = false;
  let updateShown = false;
  let hideTimer = null;
  const BRIEF = { saved: 6000, cached: 6000 }; // ms on screen; the others stay until closed
  const said = (kind) => { try { return sessionStorage.getItem(`offline-notice.${kind}`) !== null; } catch { return false; } };
  const remember = (kind) => { try { sessionStorage.setItem(`offline-notice.${kind}`, "1"); } catch { /* storage off */ } };

  function show(kind, text, action) {
    if (updateShown && kind !== "update") return; // the reload offer stays until it is taken
    if (kind !== "update" && said(kind)) return; // once a visit
    if (!notice) { // styled by assets/docs.css (the Content-Security-Policy allows no <style>)
      notice = document.createElement("div");
      notice.id = "offline-notice";
      notice.setAttribute("role", "status");
      const content = document.querySelector(".md-content__inner") ?? document.body;
      content.prepend(notice);
    }
    clearTimeout(hideTimer);
    notice.dataset.state = kind;
    notice.textContent = text;
    if (action) {
      const button = document.createElement("button");
      button.type = "button";
      button.textContent = action.label;
      button.addEventListener("click", action.run);
      notice.appendChild(button);
    }
    if (kind !== "update") {
      const close = document.createElement("button");
      close.type = "button";
      close.className = "offline-close";
      close.setAttribute("aria-label", "Dismiss");
      close.textContent = "×";
      close.addEventListener("click", () => { notice.hidden = true; remember(kind); });
      notice.appendChild(close);
    }
    notice.hidden = false;
    if (kind in BRIEF) {
      remember(kind);
      hideTimer = setTimeout(() => { notice.hidden = true; }, BRIEF[kind]);
    }
  }

  const versionNote = () => (state.version ? ` (version ${state.version})` : "");

  function showOffline() {
    if (!state.controlled) return;
    state.offline = true;
    show("offline", `You are offline: this page${location.pathname.endsWith("/calculator/") ? " and the calculator" : ""} ` +
      `work from the copy saved on this device${versionNote()}.`);
  }

  function showCached() {
    state.offline = false;
    show("cached", `Served from the copy saved on this device${versionNote()}; it works offline.`);
  }

  function offerReload(waiting) {
    updateShown = true;
    show("update", "A new version is available — reload to use it.", {
      label: "Reload",
      run: () => {
        reloading = true;
        waiting.postMessage({ type: "SKIP_WAITING" }); // controllerchange then reloads
      },
    });
  }

  function askVersion(worker) {
    return new Promise((resolve) => {
      const channel = new MessageChannel();
      channel.port1.onmessage = (e) => resolve(e.data.version);
      worker.postMessage({ type: "VERSION" }, [channel.port2]);
      setTimeout(() => resolve(null), 2000);
    });
  }

  // Is the site reachable? A request the service worker leaves to the network (sw.js is never
  // precached); it fails when the server or the network is gone.
  async function reachable() {
    try {
      await fetch(new URL("sw.js", root), { method: "HEAD", cache: "no-store" });
      return true;
    } catch {
      return false;
    }
  }

  function watch(registration) {
    const check = (worker) => {
      if (!worker) return;
      const done = () => { if (worker.state === "installed" && sw.controller) offerReload(worker); };
      done();
      worker.addEventListener("statechange", done);
    };
    if (registration.waiting && sw.controller) offerReload(registration.waiting);
    check(registration.installing);
    registration.addEventListener("updatefound", () => check(registration.installing));
  }

  sw.addEventListener("controllerchange", () => {
    if (reloading) location.reload();
    else if (state.controlled) show("update", "This site was updated in another tab — reload to use the new version.",
      { label: "Reload", run: () => location.reload() });
  });

  async function start() {
    let registration;
    try {
      registration = await sw.register(new URL("sw.js", root), { scope: root.href });
    } catch (e) {
      console.warn("offline: the service worker could not be registered:", e);
      return;
    }
    watch(registration);
    if (state.controlled) {
      state.version = await askVersion(sw.controller);
      if (await reachable()) {
        showCached();
        registration.update().catch(() => {}); // a new deployment? updatefound handles it
      } else {
        showOffline();
      }
    } else {
      // First visit: say so once the files are saved.
      const active = await sw.ready;
      state.version = await askVersion(active.active);
      if (state.version) {
        show("saved", `This site is now saved on this device${versionNote()} and works offline.`);
      }
    }
    state.ready = true;
  }

  // When to register. On the calculator's first visit, not before the live result (or 20 s):
  // the precache then revalidates what the page has just loaded (304s) instead of downloading
  // the 16 MiB runtime a second time while Python starts.
  function whenQuiet(go) {
    const pre = document.getElementById("estimate-json");
    if (state.controlled || !pre || pre.dataset.state === "live") return go();
    let started = false;
    const once = () => { if (!started) { started = true; observer.disconnect(); go(); } };
    const observer = new MutationObserver(() => { if (pre.dataset.state === "live") once(); });
    observer.observe(pre, { attributes: true, attributeFilter: ["data-state"] });
    setTimeout(once, 20000);
  }

  addEventListener("offline", showOffline);
  addEventListener("online", () => { if (state.controlled && state.offline) showCached(); });
  const go = () => whenQuiet(() => start().catch((e) => console.warn("offline:", e)));
  if (document.readyState === "complete") go();
  else addEventListener("load", go);
})();
