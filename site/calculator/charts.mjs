// The calculator's charts: memory against the micro-batch and the sequence length with every
// GPU preset's capacity as a line, and the step's moments with the peak marked. calc draws them
// (calc.charts, the `charts` operation: SVG whose marks carry their bytes as data attributes);
// this only places them. The page opens on the charts computed at build time (STATIC.charts).

import { $, STATIC, ask, esc, isLatest } from "./page.mjs";

// The charts, in their place after the report (results.mjs), drawn from the build's answer.
export function addCharts() {
  $("calc-charts-place").outerHTML = `<section id="calc-charts" class="calc-charts" aria-label="Charts">
    <h3>How memory grows</h3><div class="chart-charts" data-state="static"></div></section>`;
  drawCharts(STATIC.charts, "static");
}

function caption(chart) {
  if (chart.id !== "timeline") {
    return `<figcaption>Dots: calc's estimate at each value (the dashed line: this scenario).
      Level lines: each GPU preset's usable memory, this scenario's GPU in red; the scenario stops
      fitting a card where the curve crosses its line. Hover a line for its GPU.</figcaption>`;
  }
  return `<figcaption>Each bar is a moment of the step on the GPU with the peak, in the order they happen:
    forward, backward, optimizer step. The line is the GPU's usable memory; the CUDA context,
    NCCL buffers and the allocator's cache come on top of the bars.</figcaption>`;
}

// calc's charts (the `charts` answer's list) in the page; `state` "static" or "live".
export function drawCharts(charts, state) {
  const box = $("calc-charts").querySelector(".chart-charts");
  box.innerHTML = charts.map((c) => `<figure class="chart-figure" data-chart="${esc(c.id)}">${c.svg}${caption(c)}</figure>`).join("");
  box.dataset.state = state;
}

export async function showCharts(scenario, mine) {
  const answer = await ask("charts", { scenario });
  if (!isLatest(mine)) return;
  if (answer.ok) drawCharts(answer.charts, "live");
  else $("calc-charts").querySelector(".chart-charts").dataset.state = "error";
}
