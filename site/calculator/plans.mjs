// The planning panels' answers as calc returned them, formatted: the advisor's plans, the
// cheapest GPUs, the RL memory, serving memory. Each figure keeps calc's raw value in a
// data-value attribute; every number is written by format.mjs (calc.formatting's twin).

import { fixed, significant } from "../assets/format.mjs";
import { count, esc, gib, gpuName, hours, params, pct, secs, share, tflops, usd, verdict } from "./page.mjs";

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
    dense peak (${tflops(s.peak_tflops_per_gpu)} TFLOPS), ${significant(s.intra_node_gbps_one_way)} GB/s one way inside a node,
    ${significant(s.inter_node_gbps)} GB/s per GPU between nodes, ${share(s.overlap)} of the communication hidden behind
    compute; memory within ${share(s.target)} of the GPU, offloaded states within ${significant(s.host_memory_gib)} GiB of host memory per node.
    Plans within ${share(s.tie_tolerance)} of each other are tied and listed simplest first. A model for ranking layouts: measure the top few.</small></p>`;
  applies.advise = a.plans.map((p) => ({ scenario: p.scenario, title: `advisor plan ${p.rank} (${layoutText(p.layout)})` }));
  if (!a.plans.length) {
    const changes = a.changes.length ? `<p>Smallest change that makes something fit: <strong>${esc(a.changes[0].title)}</strong>${a.changes.length > 1
      ? `; or: ${a.changes.slice(1).map((c) => esc(c.title)).join("; ")}` : ""}.</p>` : "<p>No single change searched makes it fit.</p>";
    return `${head}<p id="calc-advise-none"><strong>No layout of ${count(s.gpus)} GPUs fits</strong>: ${esc(a.floor?.text ?? "")}.</p>${changes}${dropped}${assumed}`;
  }
  // With allow_lora the plans come grouped by what they train (full first): a heading row
  // before each group says what it trains, and that LoRA or QLoRA changes it
  const groups = a.trains.length > 1 ? Object.fromEntries(a.trains.map((g) => [g.finetuning, g])) : {};
  const heading = (g) => `<tr class="calc-group" data-finetuning="${esc(g.finetuning)}"><td colspan="9"><strong>${esc(g.title)}</strong>: ${g.changes_training
    ? `changes what is trained, not equivalent to full fine-tuning (${params(g.trainable_param_count)} adapter parameters, the base frozen)`
    : `trains all ${params(g.param_count)} parameters`}${g.plans ? "" : "; nothing fits"}</td></tr>`;
  const rows = a.plans.map((p, i) => {
    const l = p.layout, e = p.estimate;
    const group = groups[p.finetuning] && (i === 0 || a.plans[i - 1].finetuning !== p.finetuning)
      ? heading(groups[p.finetuning]) : "";
    return `${group}<tr data-rank="${p.rank}"><td>${p.rank}</td>
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
  const within = c.deadline_hours === null ? "with no deadline" : `within ${hours(c.deadline_hours)}`;
  applies.cheapest = c.options.map((o) => ({ scenario: o.scenario, title: `${o.gpus} × ${gpuName(o.gpu)}` }));
  const rows = c.options.map((o, i) => `<tr data-gpu="${esc(o.gpu)}"><td>${i + 1}</td><td>${esc(gpuName(o.gpu))}</td>
      ${numCell("gpus", o.gpus, count(o.gpus))}
      <td data-key="zero" data-value="${o.zero}">ZeRO ${o.zero}${o.changes.length ? `<br><small>(${esc(o.changes.join(", "))} added)</small>` : ""}</td>
      ${numCell("device_bytes", o.device_bytes, `${gib(o.device_bytes)}<br><small>of ${gib(o.usable_bytes)}</small>`)}
      ${numCell("train_hours", o.train_hours, hours(o.train_hours))}
      ${numCell("gpu_hours", o.gpu_hours, count(o.gpu_hours))}
      ${numCell("cost_usd", o.cost_usd, `${usd(o.cost_usd)}<br><small>at ${usd(o.price_per_gpu_hour)}/GPU-hour</small>`)}
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
  const sized = (n) => (n ? `, ${params(n)} parameters` : "");
  const label = {
    training: `Training step (at ${count(m.seq_len)} tokens)`,
    kv_cache: `Rollout KV cache (${count(m.sequences_per_engine)} sequences of ${count(m.seq_len)} tokens per engine, ${count(m.engines)} engine${m.engines === 1 ? "" : "s"} of tp ${count(m.tp)})`,
    inference_weights: `Rollout engine's weights (split over tp ${count(m.tp)})`,
    engine_workspace: "Rollout engine's activation workspace",
    critic: `Critic's training step (PPO${sized(m.param_counts.critic)})`,
    reference: "Reference model (frozen, bf16)",
    reward_model: `Reward model (frozen, bf16${sized(m.param_counts.reward_model)})`,
  };
  const rows = Object.entries(m.components).filter(([, b]) => b > 0).map(([k, b]) => `<tr${k === m.dominant ? ' class="calc-peak"' : ""}>
    <td>${esc(label[k] ?? k)}</td>${numCell(k, b, gib(b))}</tr>`).join("");
  const listed = (group, suffix) => Object.entries(m[group]).filter(([, b]) => b > 0)
    .map(([k, b]) => `<span data-key="${group}.${esc(k)}" data-value="${b}">${esc(k)}${suffix} ${gib(b)}</span>`).join(", ");
  const foot = m.colocated || m.algorithm === "dpo"
    ? `Per GPU: the larger phase (${listed("phases", "")})` : `Per GPU: the largest pool of GPUs (${listed("pools", " GPUs")})`;
  const engine = m.algorithm === "dpo" ? "" : `: ${count(m.sequences)} sequences (prompts × samples),
      ${m.colocated ? "the engine on the training GPUs" : "the engine on GPUs of its own"}${m.offload_between_phases ? ", models offloaded between phases" : ""}`;
  const host = m.host_bytes > 0 ? `<p id="calc-rl-host" data-value="${m.host_bytes}">Host memory: ${gib(m.host_bytes)} of pinned RAM per GPU
      (${[m.offload_between_phases && "the models offloaded between phases", m.sleep_mode && "the sleeping engine's weights"].filter(Boolean).join(" and ") || "the scenario's CPU offload"}).</p>` : "";
  return `<div class="calc-headline calc-verdict--${cls}" data-verdict="${cls}">
      <div class="calc-big" data-key="total_bytes" data-value="${m.total_bytes}">${gib(m.total_bytes)} <small>per GPU</small></div>
      <div>${pct(m.utilization)} of ${esc(gpuName(m.gpu))} (${gib(m.usable_bytes)}): <strong>${word}</strong>;
        the ${esc(m.dominant.replace("_", " "))} dominates.</div></div>
    <table class="calc-table calc-tool-table calc-parts" id="calc-rl-table"><caption>${esc(m.algorithm.toUpperCase())}${engine}</caption>
      <thead><tr><th>Part</th><th>Per GPU</th></tr></thead><tbody>${rows}</tbody>
      <tfoot><tr><th>${foot}</th>
      <th class="calc-num">${gib(m.total_bytes)}</th></tr></tfoot></table>
    <p id="calc-rl-alone" data-value="${m.scenario_device_bytes}">The training step alone, as set above
      (${count(request.scenario.training.seq_len)} tokens): ${gib(m.scenario_device_bytes)} per GPU.</p>
    ${host}${m.notes.length ? notes(m.notes) : ""}`;
}

// Serving memory (calc.plan.inference_memory): the engine's budget, split into what it loads and
// the KV cache left, and the sequences of max_model_len that cache holds at once.
export function renderServing(m) {
  const [cls, word] = verdict(m);
  const row = (key, value, text) => `<tr><td>${text}</td>${numCell(key, value, gib(value))}</tr>`;
  const rows = [
    row("weight_bytes", m.weight_bytes, `Weights (${esc(m.weight_dtype)}, ${params(m.param_count)} parameters${m.tp > 1 ? `, split over tp ${count(m.tp)}` : ""})`),
    row("activation_bytes", m.activation_bytes, `Activation workspace (profiling pass of ${count(m.max_num_batched_tokens)} tokens)`),
    ...Object.entries(m.non_torch_bytes).map(([k, b]) => row(`non_torch_bytes.${k}`, b, `${esc(m.non_torch_labels[k])} <small>(empirical)</small>`)),
    `<tr class="calc-peak"><td>KV cache: ${count(m.kv_cache_tokens)} tokens of ${count(m.kv_bytes_per_token)} bytes</td>${numCell("kv_cache_bytes", m.kv_cache_bytes, gib(m.kv_cache_bytes))}</tr>`,
  ].join("");
  const seqs = m.max_concurrent_sequences;
  return `<div class="calc-headline calc-verdict--${cls}" data-verdict="${cls}">
      <div class="calc-big" data-key="max_concurrent_sequences" data-value="${seqs}">${count(seqs)} <small>sequence${seqs === 1 ? "" : "s"} at once</small></div>
      <div>of ${count(m.max_model_len)} tokens each, on ${esc(gpuName(m.gpu))}${m.tp > 1 ? ` × ${count(m.tp)} (tp)` : ""}: the KV cache holds
        ${fixed(m.max_concurrency, 2)}× the context length, at most ${count(m.max_num_seqs)} sequences are scheduled (max_num_seqs);
        <strong>${word}</strong>.</div></div>
    <div class="calc-compare-wrap"><table class="calc-table calc-tool-table calc-parts" id="calc-inference-table">
      <caption>Per GPU: the engine's budget, ${share(m.gpu_memory_utilization)} of ${gib(m.usable_bytes)}</caption>
      <thead><tr><th>Part</th><th>Per GPU</th></tr></thead><tbody>${rows}</tbody>
      <tfoot><tr><th>Engine budget (what nvidia-smi shows once the cache is allocated)</th>${numCell("device_bytes", m.device_bytes, gib(m.device_bytes))}</tr></tfoot></table></div>
    <p id="calc-inference-per-seq" data-value="${m.kv_bytes_per_sequence}">KV cache per sequence of ${count(m.max_model_len)} tokens:
      <strong>${gib(m.kv_bytes_per_sequence)}</strong> (${count(m.kv_bytes_per_token)} bytes a token on this GPU).</p>
    ${m.notes.length ? notes(m.notes) : ""}`;
}
