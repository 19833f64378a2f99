// Render the formulas arithmatex leaves as \( \) and \[ \] (generic mode) with the vendored KaTeX,
// and lend the formula reference's "Show the math" (site/reference/formulas.mjs) the same
// renderer: window.calcMath.render.
//
// Long formulas wrap. KaTeX breaks a line of inline math only after a binary operator or a
// relation on the formula's top level, never inside \left( ... \right): a long
// \max\left(a,\ b\right) or \left\lceil ... \right\rceil is one box as wide as itself, and a
// table cell is never narrower than its widest box (issue 13: the formula tables scrolled
// sideways at 1366 px). breakableTex writes a long group's delimiters with the fixed-size
// command (\bigl( or a plain "(") that draws them as \left drew them, which puts the group's
// contents on the top level, where KaTeX may break them, and allows a break after each of its
// commas. A short group stays whole. The symbols are the same, in the same order, at the same
// sizes; the MathML's TeX annotation keeps the formula as it was written.
(() => {
  const LONG = 24; // a group this wide (in characters, breakableTex's width) may break: ~12em
  const STACKED = /^\\(?:[dt]?frac|binom)$/; // two arguments, one above the other
  const COMMANDS = { "\\max": 3, "\\min": 3, "\\,": 0.2, "\\ ": 0.3, "\\;": 0.3, "\\!": 0 };
  const SILENT = /^\\(?:left|right|allowbreak|nobreak|displaystyle|textstyle|text|mathrm)$/;

  // TeX as a tree: a command, one character, a {group}, or a \left ... \right pair
  function parse(tex) {
    const tokens = tex.match(/\\[a-zA-Z]+|\\[^a-zA-Z]|[^\\]/g) || [];
    let i = 0;
    const skipSpace = () => { while (tokens[i] === " ") i++; };
    function body(until) { // the nodes up to the closing "}" or "\right" (or the end)
      const nodes = [];
      while (i < tokens.length && tokens[i] !== until) {
        const start = i, t = tokens[i++];
        const raw = () => tokens.slice(start, i).join(""); // as written
        if (t === "{") { const group = body("}"); i++; nodes.push({ group, raw: raw() }); }
        else if (t === "\\left") {
          skipSpace();
          const open = tokens[i++];
          const inside = body("\\right");
          i++; skipSpace();
          const close = tokens[i++];
          nodes.push({ open, inside, close, raw: raw() });
        } else nodes.push(t);
      }
      return nodes;
    }
    const tree = body(null);
    return i >= tokens.length ? tree : null; // a stray "}" or "\right": leave the TeX alone
  }

  // about how many characters wide nodes are: a subscript ~0.7 of a character, a thin space 0.2,
  // a fraction as wide as the wider of its two lines
  function width(nodes, scale = 1) {
    let w = 0;
    const arg = (k) => (typeof nodes[k] === "string" ? [nodes[k]] : nodes[k]?.group) ?? [];
    for (let k = 0; k < nodes.length; k++) {
      const n = nodes[k];
      if (typeof n !== "string") w += width(n.group ?? n.inside, scale) + (n.group ? 0 : 2 * scale);
      else if (n === "^" || n === "_") w += width(arg(++k), scale * 0.7);
      else if (STACKED.test(n)) { w += Math.max(width(arg(k + 1), scale), width(arg(k + 2), scale)); k += 2; }
      else if (n !== " " && !SILENT.test(n)) w += scale * (COMMANDS[n] ?? 1);
    }
    return w;
  }

  const BREAK = /^(?:[+\-=<>]|\\(?:cdot|times|approx|le|ge|ne|pm))$/; // binary operators, relations

  // a \left ... \right group to write with fixed-size delimiters: long, and somewhere to break
  // once it is open (an operator, a comma, a group opened in turn)
  function opens(n) {
    return n.inside !== undefined && n.open !== "." && n.close !== "." && width(n.inside) >= LONG
      && n.inside.some((m) => typeof m === "string" ? BREAK.test(m) || m === "," : opens(m));
  }

  // the size KaTeX's \left gives the group's delimiters (in `style`), as the fixed-size command
  // that draws them alike ("" for the font's own glyph); null for a delimiter stacked from
  // pieces, which only \left draws
  const FIXED = { size1: "\\big", size2: "\\Big", size3: "\\bigg", size4: "\\Bigg" };
  const sizes = new Map(); // style + group as written -> its size: the same group recurs
  function fixedSize(n, style) {
    const key = style + n.raw;
    if (!sizes.has(key)) {
      const html = katex.renderToString(key, { throwOnError: false });
      const open = /class="mopen[^"]*"[^>]*>(?:<span class="delimsizing (size\d|mult)")?/.exec(html);
      sizes.set(key, !open ? null : open[1] === undefined ? "" : FIXED[open[1]] ?? null);
    }
    return sizes.get(key);
  }

  // `top`: the nodes sit on the formula's top level (not in a {group}), where KaTeX breaks lines
  function write(nodes, top, style) {
    let out = "";
    for (let k = 0; k < nodes.length; k++) {
      const n = nodes[k];
      if (typeof n === "string") {
        out += n;
        if (top && n === ",") { // after the space that follows it, if any
          if (nodes[k + 1] === "\\ " || nodes[k + 1] === " ") out += nodes[++k];
          out += "\\allowbreak ";
        }
        continue;
      }
      const size = top && opens(n) ? fixedSize(n, style) : null;
      out += size === null ? n.raw
        : `${size && `${size}l`}${n.open} ${write(n.inside, true, style)}${size && `${size}r`}${n.close} `;
    }
    return out;
  }

  // `tex` with its long groups open to line breaks; `style` (\displaystyle) is the one it is set in
  function breakableTex(tex, style = "") {
    const tree = parse(tex);
    return tree ? write(tree, true, style) : tex;
  }

  // `tex` into `el`, inline (wrapping where breakableTex allows) unless `display`; `big` sets
  // inline math as large as display math (fractions included)
  function render(el, tex, { display = false, big = false } = {}) {
    if (typeof katex === "undefined") { // KaTeX failed to load: keep the TeX readable
      el.textContent = display ? `\\[ ${tex} \\]` : `\\( ${tex} \\)`;
      return;
    }
    const style = big ? "\\displaystyle " : "";
    const source = display ? tex : style + breakableTex(tex, style);
    katex.render(source, el, { displayMode: display, throwOnError: false });
    const annotation = el.querySelector('annotation[encoding="application/x-tex"]');
    if (annotation) annotation.textContent = tex;
  }

  window.calcMath = { render };

  document.addEventListener("DOMContentLoaded", () => {
    if (typeof katex === "undefined") return; // KaTeX failed to load: keep the TeX
    for (const el of document.querySelectorAll(".arithmatex")) {
      const text = el.textContent.trim();
      const math = /^\\\((.*)\\\)$/s.exec(text) || /^\\\[(.*)\\\]$/s.exec(text);
      if (math) render(el, math[1].trim(), { display: text.startsWith("\\[") });
    }
  });
})();
