// Render the formulas arithmatex leaves as \( \) and \[ \] (generic mode) with the vendored KaTeX.
document.addEventListener("DOMContentLoaded", () => {
  if (typeof renderMathInElement !== "function") return; // KaTeX failed to load: keep the TeX
  for (const el of document.querySelectorAll(".arithmatex")) {
    renderMathInElement(el, {
      delimiters: [{ left: "\\(", right: "\\)", display: false }, { left: "\\[", right: "\\]", display: true }],
      throwOnError: false,
    });
  }
});
