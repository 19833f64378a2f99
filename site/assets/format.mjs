// How every number is written: the twin of calc/formatting.py, with the same rules (rounding
// half away from zero on the exact value, as toFixed does; thousands separators), checked
// against it value by value by tests/test_formatting.py. No DOM: node imports it as well.

const GiB = 1024 ** 3;
const SCALES = [[1e12, "T"], [1e9, "B"], [1e6, "M"], [1e3, "K"]];
const ROUNDS_UP = 0.9995; // from here a unit's count shows as 1.00 at three significant figures

const group = (digits) => digits.replace(/\B(?=(\d{3})+(?!\d))/g, ",");

// `x` with `digits` decimals and thousands separators ("1,234.5"); never "-0.00".
export function fixed(x, digits) {
  const text = Math.abs(x).toFixed(digits);
  const [whole, frac] = text.split(".");
  const zero = /^[0.]*$/.test(text);
  return `${x < 0 && !zero ? "-" : ""}${group(whole)}${frac === undefined ? "" : `.${frac}`}`;
}

// `x` to `figures` significant figures, never in exponent form: 7.62, 70.6, 671, 1,307.
export function significant(x, figures = 3) {
  if (x === 0) return "0";
  return fixed(x, Math.max(0, figures - 1 - Math.floor(Math.log10(Math.abs(x)))));
}

export const gibNumber = (n) => fixed(n / GiB, 2); // a column whose header names the unit
export const gib = (n) => `${gibNumber(n)} GiB`;
export const percent = (x) => `${fixed(100 * x, 1)}%`;
export const count = (n) => fixed(n, 0);
export const tflops = (x) => (Math.abs(x) >= 100 ? fixed(x, 0) : significant(x));

export function params(n) {
  // a count that rounds to 1,000 of a unit is one of the next: 999,885,952 is "1.00 B"
  for (const [scale, unit] of SCALES) {
    if (Math.abs(n) >= scale * ROUNDS_UP) return `${significant(Math.sign(n) * Math.max(Math.abs(n) / scale, 1))} ${unit}`;
  }
  return fixed(n, 0);
}

// The words for calc's fit status (calc.estimate.fit_status), everywhere a verdict is written.
export const FIT_WORDS = { fits: "fits", tight: "tight", does_not_fit: "does not fit" };
// The same where a sentence says them of its scenario ("it fits, but above the target").
export const FIT_PHRASES = { fits: "fits within the target", tight: "fits, but above the target",
  does_not_fit: "does not fit" };

// Numbers inside names ordered by value: "llama-2-7b" before "llama-2-13b" (calc.formatting's
// natural_key: lower-cased, digit runs compared as numbers and before text, text by code point).
const pieces = (s) => s.toLowerCase().split(/(\d+)/).filter(Boolean).map((p) => (/^\d/.test(p) ? [0, Number(p)] : [1, p]));
export function naturalCompare(a, b) {
  const [x, y] = [pieces(a), pieces(b)];
  for (let i = 0; i < Math.min(x.length, y.length); i++) {
    for (let j = 0; j < 2; j++) if (x[i][j] !== y[i][j]) return x[i][j] < y[i][j] ? -1 : 1;
  }
  return x.length - y.length;
}

// The page's own: times, durations, money, signed differences (the command line writes none of them).
export const signed = (b) => `${b > 0 ? "+" : b < 0 ? "−" : "±"}${gib(Math.abs(b))}`;
export const secs = (s) => (s >= 100 ? `${fixed(s, 0)} s` : s >= 1 ? `${fixed(s, 2)} s` : `${fixed(1000 * s, 0)} ms`);
export const hours = (h) => (h >= 48 ? `${fixed(h, 0)} h (${fixed(h / 24, 1)} days)` : h >= 1 ? `${fixed(h, 1)} h` : `${fixed(60 * h, 0)} min`);
export const usd = (x) => `$${fixed(x, x < 100 ? 2 : 0)}`;
