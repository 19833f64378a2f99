// Keeping and sharing scenarios: the share link (#s=, the page address), scenarios saved in
// this browser, pinned scenarios compared side by side (calc's `compare`), download and upload
// of the scenario JSON, copying the report.
//
// What this browser keeps (localStorage) is read entry by entry: an entry is {name, scenario,
// device_bytes?} within calc's bounds (LIMITS). A list or an entry that is not is set aside: the
// list's text as it was, with the reasons, goes to calc.set-aside, and the page lists it under the
// saved scenarios with a download and a discard button. It is never used, and never deleted
// without the user's word; the good entries stay in use.

import { FIT_WORDS } from "../assets/format.mjs";
import { encodeScenario } from "../assets/scenario_link.mjs";
import { depthOf, depthRule, isObject, sizeRule, textProblem, utf8 } from "../assets/untrusted.mjs";
import { readScenario } from "./form.mjs";
import { $, DATA, LIMITS, ask, count, esc, failed, gib, gpuName, label, live, pct, say, signed } from "./page.mjs";

const STORE = "calc.saved-scenarios";
const PINS = "calc.pinned-scenarios";
const ASIDE = "calc.set-aside";
const LISTS = { [STORE]: "Saved scenarios", [PINS]: "Pinned scenarios", [ASIDE]: "The set-aside list" };
let compareSeq = 0;
let unkept = []; // set-aside records this browser refused to store (full): shown all the same

function getItem(key) {
  try { return localStorage.getItem(key); } catch { return null; } // storage off: nothing kept
}

function setItem(key, value) {
  try {
    localStorage.setItem(key, value);
    return true;
  } catch (e) {
    say(`This browser did not keep it: ${e.message}.`, "error");
    return false;
  }
}

// Why a list entry cannot be used, or null.
function entryProblem(entry) {
  if (!isObject(entry)) return `is ${entry === null ? "null" : Array.isArray(entry) ? "a list" : `a ${typeof entry}`}, not a scenario entry`;
  if (typeof entry.name !== "string") return "has no name (a string)";
  if (!isObject(entry.scenario)) return "has no scenario (an object)";
  if (entry.device_bytes != null && !Number.isFinite(entry.device_bytes)) return "has a device_bytes that is not a number";
  if (depthOf(entry.scenario, LIMITS.max_depth) > LIMITS.max_depth) return `has a scenario that ${depthRule(LIMITS.max_depth)}`;
  if (depthOf(entry, LIMITS.max_depth + 1) > LIMITS.max_depth + 1) return depthRule(LIMITS.max_depth + 1);
  const size = new TextEncoder().encode(JSON.stringify(entry)).length;
  return size > LIMITS.max_text_bytes ? sizeRule(size, LIMITS.max_text_bytes) : null;
}

// The set-aside records, each {key, text, reasons, at}; a set-aside list that is not one of them is
// itself shown (and kept) as one record.
function readAside() {
  const text = getItem(ASIDE);
  const list = text === null ? [] : parsedList(text);
  const record = (r) => isObject(r) && typeof r.key === "string" && typeof r.text === "string"
    && Array.isArray(r.reasons) && r.reasons.every((x) => typeof x === "string");
  const kept = list && list.every(record)
    ? list.map((r) => ({ key: r.key, text: r.text, reasons: r.reasons, at: typeof r.at === "string" ? r.at : "" }))
    : [{ key: ASIDE, text, reasons: ["could not be read"], at: "" }];
  return [...kept, ...unkept];
}

function parsedList(text) {
  try { const v = JSON.parse(text); return Array.isArray(v) ? v : null; } catch { return null; }
}

function setAside(key, text, reasons) {
  const list = readAside().filter((r) => !unkept.includes(r));
  if (list.some((r) => r.key === key && r.text === text)) return true; // already kept
  const record = { key, text, reasons, at: new Date().toISOString() };
  if (setItem(ASIDE, JSON.stringify([...list, record]))) return true;
  unkept.push(record);
  return false;
}

// The usable entries of list `key`; the list as it was is set aside when any entry is not.
function readList(key) {
  const text = getItem(key);
  if (text === null) return [];
  let list;
  try { list = JSON.parse(text); } catch (e) {
    setAside(key, text, [`is not valid JSON (${e.message})`]);
    return [];
  }
  if (!Array.isArray(list)) {
    setAside(key, text, ["is not a list"]);
    return [];
  }
  const good = [];
  const reasons = [];
  list.forEach((entry, i) => {
    const problem = entryProblem(entry);
    if (problem) reasons.push(`entry ${i + 1} ${problem}`);
    else good.push(entry);
  });
  if (reasons.length && setAside(key, text, reasons)) setItem(key, JSON.stringify(good));
  return good;
}

const saved = () => readList(STORE);
export const pinned = () => readList(PINS);

// ---- the share link: the form's scenario in the page address ----
export function linkTo(scenario) {
  const hash = `#s=${encodeScenario(scenario)}`;
  history.replaceState(null, "", hash);
  $("calc-share").href = hash;
  $("calc-math").href = new URL(`reference/formulas/${hash}`, new URL(DATA.root, location.href)).href;
}

const nameOf = (s) =>
  `${typeof s.model === "string" ? s.model : "custom model"} · b${s.training.micro_batch_size} × ${s.training.seq_len} on ${s.gpu}`;

// ---- saved in this browser, and what was set aside ----
function renderSaved() {
  const list = saved();
  const aside = readAside();
  const savedHtml = list.length ? `<h3>Saved in this browser</h3><ul class="calc-saved">${list.map((e, i) =>
    `<li><a href="#s=${encodeScenario(e.scenario)}">${esc(e.name)}</a>
     <small>${e.device_bytes ? gib(e.device_bytes) : ""}</small>
     <button type="button" class="calc-link" data-pin-saved="${i}">pin to compare</button>
     <button type="button" class="calc-link" data-forget="${i}">remove</button></li>`).join("")}</ul>` : "";
  const reasons = (r) => esc(r.reasons.slice(0, 8).join("; ") + (r.reasons.length > 8 ? `; and ${r.reasons.length - 8} more` : ""));
  const asideHtml = aside.length ? `<div id="calc-aside" class="calc-aside" role="status"><h3>Set aside</h3>
    <p>What this browser kept that the calculator cannot read, as it was. It is not used, and it is
    kept until you discard it; every readable entry stays in use.</p><ul>${aside.map((r, i) =>
    `<li data-aside="${i}"><strong>${esc(Object.hasOwn(LISTS, r.key) ? LISTS[r.key] : r.key)}</strong>${r.at ? ` <small>(set aside ${esc(r.at.slice(0, 10))})</small>` : ""}:
     ${reasons(r)}.
     <button type="button" class="calc-link" data-aside-download="${i}">download it</button> ·
     <button type="button" class="calc-link" data-aside-discard="${i}">discard it</button></li>`).join("")}</ul></div>` : "";
  $("calc-saved").innerHTML = savedHtml + asideHtml;
}

function download(text, name) {
  const blob = new Blob([text], { type: "application/json" });
  const a = Object.assign(document.createElement("a"), { href: URL.createObjectURL(blob), download: name });
  a.click();
  URL.revokeObjectURL(a.href);
}

// ---- pinned: compared side by side, differences from the first ----
function pin(name, scenario) {
  if (!setItem(PINS, JSON.stringify([...pinned(), { name, scenario }]))) return;
  showComparison().catch(failed);
  say(`Pinned “${name}” for comparison.`);
}

export async function showComparison() {
  const list = pinned();
  const box = $("calc-compare");
  if (!list.length) { box.innerHTML = ""; return; }
  const head = `<h3>Compare pinned scenarios</h3>`;
  const removers = list.map((e, i) => `<button type="button" class="calc-link" data-unpin="${i}"
    aria-label="Remove ${esc(e.name)} from the comparison">remove</button>`);
  const names = `<ul>${list.map((e, i) => `<li>${esc(e.name)} ${removers[i]}</li>`).join("")}</ul>`;
  if (!live.worker) {
    box.innerHTML = `${head}<p>${list.length} pinned; the comparison is computed as soon as Python is ready.</p>${names}`;
    return;
  }
  const mine = ++compareSeq;
  const answer = await ask("compare", { scenarios: list.map((e) => e.scenario), labels: list.map((e) => e.name) });
  if (mine !== compareSeq) return;
  if (!answer.ok) {
    box.innerHTML = `${head}<p class="calc-status calc-status--error">A pinned scenario is not valid:
      ${esc(answer.field)}: ${esc(answer.message)}</p>${names}`;
    return;
  }
  const cols = answer.scenarios;
  const cell = (key, value, text) => `<td class="calc-num" data-key="${key}" data-value="${esc(value)}">${text}</td>`;
  const row = (title, key, fmt) => `<tr><th scope="row">${title}</th>${cols.map((c) => cell(key, c[key], fmt(c[key], c))).join("")}</tr>`;
  const diff = (d, i) => (i > 0 ? `<br><small data-diff="${d}">${signed(d)}</small>` : "");
  const bytesWithDiff = (key) => (v, c) => `${gib(v)}${diff(c.difference[key], cols.indexOf(c))}`;
  const components = Object.keys(cols[0].components).map((k) =>
    `<tr><th scope="row">${esc(label(k))}</th>${cols.map((c, i) => cell(`components.${k}`, c.components[k],
      `${gib(c.components[k])}${diff(c.difference.components[k], i)}`)).join("")}</tr>`).join("");
  box.innerHTML = `${head}<div class="calc-compare-wrap"><table class="calc-table calc-compare" id="calc-compare-table">
    <caption>Differences are from the first (${esc(answer.baseline)}).</caption>
    <thead><tr><th></th>${cols.map((c, i) => `<th scope="col" data-label="${esc(c.label)}">${esc(c.label)}
      <br>${removers[i]}</th>`).join("")}</tr></thead><tbody>
    ${row("Model", "model", esc)}
    ${row("GPU", "gpu", (v, c) => `${esc(gpuName(v))} × ${c.gpus}`)}
    ${row("Peak allocated", "peak_bytes", bytesWithDiff("peak_bytes"))}
    ${row("Device memory", "device_bytes", bytesWithDiff("device_bytes"))}
    ${row("Utilization", "utilization", (v) => pct(v))}
    ${row("Verdict", "status", (v) => (v === "fits" ? FIT_WORDS[v] : `<strong>${FIT_WORDS[v]}</strong>`))}
    ${row("Peak phase", "peak_phase", (v) => esc(v.replace("_", " ")))}
    ${row("Micro-batch", "micro_batch_size", String)}
    ${row("Accumulation steps", "gradient_accumulation_steps", String)}
    ${row("Data parallel", "dp", String)}
    ${row("Global batch (sequences)", "global_batch_size", String)}
    ${row("Sequence length", "seq_len", String)}
    ${row("Tokens per step", "tokens_per_step", count)}
    <tr><th colspan="${cols.length + 1}">Per component, at the peak</th></tr>${components}
    </tbody></table></div>`;
}

// ---- the buttons: save, download, open, copy the report, pin; the comparison's section ----
// `page.open(source, text, problem)`: hold a scenario from outside (its text for calc to read, or
// what the page found wrong with it first).
export function addStorage(page) {
  $("calc-copy").parentElement.insertAdjacentHTML("beforeend", `
    <button type="button" class="md-button" id="calc-save">Save in this browser</button>
    <button type="button" class="md-button" id="calc-download">Download .json</button>
    <label class="md-button" for="calc-upload">Open .json</label>
    <input type="file" id="calc-upload" accept="application/json,.json" hidden>
    <button type="button" class="md-button" id="calc-copy-json">Copy report JSON</button>
    <button type="button" class="md-button" id="calc-pin">Pin to compare</button>`);
  $("calc-results").closest(".calc-grid").insertAdjacentHTML("afterend",
    '<section id="calc-compare" class="calc-compare-box" aria-label="Comparison"></section>');
  $("calc-pin").addEventListener("click", () => {
    const scenario = readScenario();
    pin(nameOf(scenario), scenario);
  });
  $("calc-save").addEventListener("click", () => {
    const scenario = readScenario();
    // the figure shown, where it is this scenario's (not while pending, nor stale)
    const current = ["live", "static"].includes($("calc-results").closest(".calc-side").dataset.state);
    const report = JSON.parse($("estimate-json").textContent);
    const name = nameOf(scenario);
    const entry = { name, scenario, ...(current ? { device_bytes: report.device_bytes } : {}) };
    if (!setItem(STORE, JSON.stringify([...saved(), entry]))) return;
    renderSaved();
    say(`Saved “${name}” in this browser.`);
  });
  $("calc-download").addEventListener("click", () => download(JSON.stringify(readScenario(), null, 2), "scenario.json"));
  // An opened file: measured before it is read (its size first), then held for calc to read.
  $("calc-upload").addEventListener("change", async (e) => {
    const file = e.target.files[0];
    e.target.value = "";
    if (!file) return;
    const source = `“${file.name}”`;
    if (file.size > LIMITS.max_text_bytes) return page.open(source, null, sizeRule(file.size, LIMITS.max_text_bytes));
    const text = utf8(new Uint8Array(await file.arrayBuffer()));
    if (text === null) return page.open(source, null, "is not UTF-8");
    const problem = textProblem(text, LIMITS);
    page.open(source, problem ? null : text, problem);
    if (!problem) say(`Opened ${source}; calc is reading it…`);
  });
  $("calc-copy-json").addEventListener("click", async () => {
    try { await navigator.clipboard.writeText($("estimate-json").textContent); say("Report JSON copied."); }
    catch { say("Select the report JSON below to copy it."); }
  });
  document.addEventListener("click", (e) => {
    const pinSaved = e.target.closest("[data-pin-saved]");
    if (pinSaved) {
      const entry = saved()[Number(pinSaved.dataset.pinSaved)];
      if (entry) pin(entry.name, entry.scenario);
    }
    const unpin = e.target.closest("[data-unpin]");
    if (unpin) {
      setItem(PINS, JSON.stringify(pinned().filter((_, i) => i !== Number(unpin.dataset.unpin))));
      showComparison().catch(failed);
    }
    const forget = e.target.closest("[data-forget]");
    if (forget) {
      setItem(STORE, JSON.stringify(saved().filter((_, i) => i !== Number(forget.dataset.forget))));
      renderSaved();
    }
    const keep = e.target.closest("[data-aside-download]");
    const record = keep && readAside()[Number(keep.dataset.asideDownload)];
    if (record) download(record.text, `calc-set-aside-${Number(keep.dataset.asideDownload) + 1}.json`);
    const drop = e.target.closest("[data-aside-discard]");
    if (drop) {
      const i = Number(drop.dataset.asideDiscard);
      const list = readAside();
      unkept = unkept.filter((r) => r !== list[i]);
      setItem(ASIDE, JSON.stringify(list.filter((r, j) => j !== i && !unkept.includes(r))));
      renderSaved();
      say("Discarded what was set aside.");
    }
  });
  try {
    pinned(); // read (and what cannot be used set aside) before the list is shown
    renderSaved();
    if (readAside().length) say("Some of what this browser kept could not be read; it is set aside (see “Set aside”).", "error");
  } catch (e) { // never the page's end: the calculator works without what this browser kept
    say(`What this browser kept could not be shown (${e.message}); nothing of it was changed.`, "error");
  }
  showComparison().catch(failed);
}
