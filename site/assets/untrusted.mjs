// Text from outside the page (a share link, a pasted config.json, an opened file, this browser's
// saved scenarios), measured before anything parses it or hands it to Python.
//
// calc reads such text within bounds (calc.reading: UTF-8, a size, a nesting depth, no repeated
// keys) and names the rule it breaks. The page checks the size and the depth first, on its own
// side, because Pyodide's JSON decoder recurses on the WebAssembly stack: text nested thousands
// deep overflows it, and a stack overflow there kills the interpreter for good. `limits` are
// calc's bounds as the build embedded them (calc.reading: max_depth, max_text_bytes,
// max_config_bytes); the messages are worded as calc words them.

const number = (n) => n.toLocaleString("en-US");

// The deepest nesting of JSON brackets (or YAML flow collections) outside strings: the same scan
// as calc.reading.nesting, so the page and calc agree on what is too deep.
export function nesting(text) {
  let depth = 0, deepest = 0, quoted = false, escaped = false;
  for (let i = 0; i < text.length; i++) {
    const ch = text[i];
    if (quoted) {
      if (escaped) escaped = false;
      else if (ch === "\\") escaped = true;
      else if (ch === '"') quoted = false;
    } else if (ch === '"') quoted = true;
    else if (ch === "[" || ch === "{") deepest = Math.max(deepest, ++depth);
    else if (ch === "]" || ch === "}") depth--;
  }
  return deepest;
}

export const sizeRule = (bytes, limit) => `is ${number(bytes)} bytes; at most ${number(limit)} are read`;
export const depthRule = (limit) => `is nested more than ${limit} levels deep`;

// Why `text` is not read (calc's rule, as a message), or null when it is within the bounds.
export function textProblem(text, limits, maxBytes = limits.max_text_bytes) {
  if (typeof text !== "string") return "is not text";
  const bytes = new TextEncoder().encode(text).length; // UTF-8, as calc counts (a lone surrogate: 3)
  if (bytes > maxBytes) return sizeRule(bytes, maxBytes);
  if (nesting(text) > limits.max_depth) return depthRule(limits.max_depth);
  return null;
}

// UTF-8 `bytes` as text, or null when they are not UTF-8 (a leading byte-order mark is dropped,
// as calc drops it).
export function utf8(bytes) {
  try {
    return new TextDecoder("utf-8", { fatal: true }).decode(bytes);
  } catch {
    return null;
  }
}

export const isObject = (v) => v !== null && typeof v === "object" && !Array.isArray(v);

// The deepest nesting of an already parsed value, counted without recursion (a value parsed
// from a deep text would overflow a recursive walk); stops counting past `limit`.
export function depthOf(value, limit) {
  const stack = [[value, 0]];
  let deepest = 0;
  while (stack.length) {
    const [v, d] = stack.pop();
    if (v === null || typeof v !== "object") continue;
    deepest = Math.max(deepest, d + 1);
    if (deepest > limit) return deepest;
    for (const item of Object.values(v)) stack.push([item, d + 1]);
  }
  return deepest;
}

// `text` parsed as JSON, or undefined (the page only uses it to fill the form; calc reads the
// text itself and says what is wrong with it).
export function parsed(text) {
  try {
    return JSON.parse(text);
  } catch {
    return undefined;
  }
}
