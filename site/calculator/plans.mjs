// The planning panels' answers as calc returned them, formatted: the advisor's plans, the
// cheapest GPUs, the RL memory. Each figure keeps calc's raw value in a data-value attribute.

import { count, esc, gib, gpuName, hours, pct, secs, share, usd, verdict } from "./page.mjs";

export const applies = { advise: [], cheapest: [] }; // what each "Apply" loads: {scenario, title}

const layoutText = (l) => [`tp ${l.tp}`, `pp ${l.pp}`, `dp ${l.dp}`, `cp ${l.cp}`, ...(l.ep > 1 ? [`ep ${l.ep}`] : [])].join(" · ");
const numCell = (key, value, html) => `<td class="calc-num" data-key="${key}" data-value="${value}">${html}</td>`;
export const notes = (list, id = "") => `<ul${id ? ` id="${id}"` : ""} class="calc-tool-notes">${list.map((n) => `<li>${esc(n)}</li>`).join("")}</ul>`;

export function renderAdvice(a) {
  const s = a.assumptions;
  const head = `<p class="calc-tool-summary">${count(s.gpus)} × ${esc(gpuName(s.gpu))} (${s.gpus_per_node} per node),
    ${count(s.global_batch)} sequences of ${count(s.seq_len)} tokens per step${s.global_batch_source === "default" ? " (the default, about 2M tokens)" : ""}: ${count(a.searched)} combinations,
    ${count(a.estimates)} memory estimates, ${count(a.fitting)} layout${a.fitting === 1 ? "" : "s"} that no
    other beats in both time and memory.</p>`;
  const dropped = `<details class="calc-tool-more"><summary>Why the other combinations were dropped</summary>
    <ul>${Object.entries(a.rejected).map(([k, n]) => `<li><code>${esc(k)}</code>: ${count(n)}</li>`).join("")}</ul></details>`;
  const assumed = `<p class="calc-tool-notes"><small>Estimated, not measured: the compute at ${share(s.mfu)} of the GPU's
    dense peak (${s.peak_tflops_per_gpu} TFLOPS), ${s.intra_node_gbps_one_way} GB/s one way inside a node,
    ${s.inter_node_gbps} GB/s per GPU between nodes, ${share(s.overlap)} of the communication hidden behind
    compute; memory within ${share(s.target)} of the GPU, offloaded states within ${s.host_memory_gib} GiB of host memory per node.
    Plans within ${share(s.tie_tolerance)} of each other are tied and listed simplest first. A model for ranking layouts: measure the top few.</small></p>`;
  applies.advise = a.plans.map((p) => ({ scenario: p.scenario, title: `advisor plan ${p.rank} (${layoutText(p.layout)})` }));
  if (!a.plans.length) {
    const changes = a.changes.length ? `<p>Smallest change that makes something fit: <strong>${esc(a.changes[0].title)}</strong>${a.changes.length > 1
      ? `; or: ${a.changes.slice(1).map((c) => esc(c.title)).join("; ")}` : ""}.</p>` : "<p>No single change searched makes it fit.</p>";
    return `${head}<p id="calc-advise-none"><strong>No layout of ${count(s.gpus)} GPUs fits</strong>: ${esc(a.floor?.text ?? "")}.</p>${changes}${dropped}${assumed}`;
  }
  const rows = a.plans.map((p, i) => {
    const l = p.layout, e = p.estimate;
    return `<tr data-rank="${p.rank}"><td>${p.rank}</td>
      <td data-key="layout">${esc(layoutText(l))}${l.sequence_parallel ? "<br><small>sequence parallel</small>" : ""}</td>
      <td data-key="zero" data-value="${l.zero}">${l.zero}<br><small>${esc(l.mixed_precision)}${l.offload_params ? ", offload params + optimizer" : l.offload_optimizer ? ", offload optimizer" : ""}</small></td>
      <td data-key="activation_checkpointing" data-value="${esc(l.activation_checkpointing)}">${esc(l.activation_checkpointing)}</td>
      <td class="calc-num" data-key="batch">${l.micro_batch_size} × ${l.gradient_accumulation_steps}</td>
      ${numCell("device_bytes", e.device_bytes, `${gib(e.device_bytes)}<br><small>${pct(e.utilization)}</small>`)}
      ${numCell("step_time_s", p.step_time_s, secs(p.step_time_s))}
      ${numCell("tokens_per_s", p.tokens_per_s, count(p.tokens_per_s))}
      <td><button type="button" class="md-button" data-apply-plan="advise:${i}" aria-label="Apply plan ${p.rank}">Apply</button></td></tr>
      <tr class="calc-why"><td></td><td colspan="8" data-key="why">${esc(p.why)}</td></tr>`;
  }).join("");
  return `${head}<div class="calc-compare-wrap"><table class="calc-table calc-tool-table" id="calc-advise-table">
    <thead><tr><th>#</th><th>Layout</th><th>ZeRO</th><th>Checkpointing</th><th>Micro-batch × accumulation</th>
    <th>Peak memory (of the GPU)</th><th>Step time</th><th>Tokens/s</th><th></th></tr></thead>
    <tbody>${rows}</tbody></table></div>${dropped}${assumed}`;
}

export function renderCheapest(c) {
  const within = c.deadline_hours === null ? "with no deadline" : `within ${c.deadline_hours} h`;
  applies.cheapest = c.options.map((o) => ({ scenario: o.scenario, title: `${o.gpus} × ${gpuName(o.gpu)}` }));
  const rows = c.options.map((o, i) => `<tr data-gpu="${esc(o.gpu)}"><td>${i + 1}</td><td>${esc(gpuName(o.gpu))}</td>
      ${numCell("gpus", o.gpus, o.gpus)}
      <td data-key="zero" data-value="${o.zero}">ZeRO ${o.zero}${o.changes.length ? `<br><small>(${esc(o.changes.join(", "))} added)</small>` : ""}</td>
      ${numCell("device_bytes", o.device_bytes, `${gib(o.device_bytes)}<br><small>of ${gib(o.usable_bytes)}</small>`)}
      ${numCell("train_hours", o.train_hours, hours(o.train_hours))}
      ${numCell("gpu_hours", o.gpu_hours, count(o.gpu_hours))}
      ${numCell("cost_usd", o.cost_usd, `${usd(o.cost_usd)}<br><small>at $${o.price_per_gpu_hour}/GPU-hour</small>`)}
      <td><button type="button" class="md-button" data-apply-plan="cheapest:${i}" aria-label="Apply ${o.gpus} × ${esc(gpuName(o.gpu))}">Apply</button></td></tr>
      <tr class="calc-why"><td></td><td colspan="8" data-key="price_source">Price: ${esc(o.price_source)}</td></tr>`).join("");
  const table = c.options.length ? `<div class="calc-compare-wrap"><table class="calc-table calc-tool-table" id="calc-cheapest-table">
    <thead><tr><th>#</th><th>GPU</th><th>GPUs</th><th>Sharding</th><th>Memory per GPU</th><th>Time</th><th>GPU-hours</th><th>Cost</th><th></th></tr></thead>
    <tbody>${rows}</tbody></table></div>` : `<p id="calc-cheapest-none"><strong>No priced GPU type fits and meets the deadline.</strong></p>`;
  const unpriced = c.unpriced.length ? `<p>Without a list price (by GPU-hours): ${c.unpriced.map((o) =>
    `${o.gpus} × ${esc(gpuName(o.gpu))}, ${hours(o.train_hours)}, ${count(o.gpu_hours)} GPU-hours`).join("; ")}.</p>` : "";
  const rejected = Object.keys(c.rejected).length ? `<details class="calc-tool-more"><summary>GPU types with no layout
    (${Object.keys(c.rejected).length})</summary><ul>${Object.entries(c.rejected).map(([g, why]) =>
    `<li><strong>${esc(gpuName(g))}</strong>: ${esc(why)}</li>`).join("")}</ul></details>` : "";
  return `<p class="calc-tool-summary">${count(c.tokens)} tokens ${within}: the cheapest layout of each GPU type, cheapest first.</p>
    ${table}${unpriced}${rejected}${notes(c.notes)}`;
}

export function renderRl(m, request) {
  const [cls, word] = verdict(m);
  const label = {
    training: `Training step (at ${count(m.seq_len)} tokens)`,
    kv_cache: `Rollout KV cache (${count(m.sequences_per_engine)} sequences of ${count(m.seq_len)} tokens per engine, ${m.engines} engine${m.engines === 1 ? "" : "s"})`,
    inference_weights: `Rollout engine's weights (split over tp ${m.tp})`,
    engine_workspace: "Rollout engine's activation workspace",
    critic: "Critic's training step (PPO)",
    reference: "Reference model (frozen, bf16)",
    reward_model: "Reward model (frozen, bf16)",
  };
  const rows = Object.entries(m.components).filter(([, b]) => b > 0).map(([k, b]) => `<tr${k === m.dominant ? ' class="calc-peak"' : ""}>
    <td>${esc(label[k] ?? k)}</td>${numCell(k, b, gib(b))}</tr>`).join("");
  return `<div class="calc-headline calc-verdict--${cls}" data-verdict="${cls}">
      <div class="calc-big" data-key="total_bytes" data-value="${m.total_bytes}">${gib(m.total_bytes)} <small>per GPU</small></div>
      <div>${pct(m.utilization)} of ${esc(gpuName(m.gpu))} (${gib(m.usable_bytes)}): <strong>${word}</strong>;
        the ${esc(m.dominant.replace("_", " "))} dominates.</div></div>
    <table class="calc-table calc-tool-table" id="calc-rl-table"><caption>${esc(m.algorithm.toUpperCase())}${m.algorithm === "dpo" ? "" : `: ${count(m.sequences)} sequences (prompts × samples),
      ${m.colocated ? "the engine on the training GPUs" : "the engine on GPUs of its own"}`}</caption>
      <thead><tr><th>Part</th><th>Per GPU</th></tr></thead><tbody>${rows}</tbody>
      <tfoot><tr><th>${m.colocated ? `Per GPU: the larger phase (${Object.entries(m.phases).map(([k, b]) => `${k} ${gib(b)}`).join(", ")})` : "Per GPU: the largest pool of GPUs"}</th>
      <th class="calc-num">${gib(m.total_bytes)}</th></tr></tfoot></table>
    <p id="calc-rl-alone" data-value="${m.scenario_device_bytes}">The training step alone, as set above
      (${count(request.scenario.training.seq_len)} tokens): ${gib(m.scenario_device_bytes)} per GPU.</p>
    ${m.notes.length ? notes(m.notes) : ""}`;
}
