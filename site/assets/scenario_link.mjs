// The share-link format of a scenario, "#s=" + base64url of its JSON: unpadded when written;
// padding and the + / alphabet are accepted when read. The same contract as the CLI's JSON
// (tools/docs_common.py writes these links at build time): a link's scenario is handed to calc
// as the text it carries, and calc reads it as the command line reads a scenario file.

import { sizeRule, textProblem, utf8 } from "./untrusted.mjs";

export function encodeScenario(scenario) {
  const bytes = new TextEncoder().encode(JSON.stringify(scenario));
  let bin = "";
  for (const b of bytes) bin += String.fromCharCode(b);
  return btoa(bin).replace(/\+/g, "-").replace(/\//g, "_").replace(/=+$/, "");
}

// A link that cannot be read; its message is the rule it breaks (for the field "scenario").
export class LinkError extends Error {}

// The scenario's JSON text in a link's fragment (after "#s="), checked against calc's bounds
// (`limits`) before anything parses it: throws LinkError.
export function scenarioText(fragment, limits) {
  let s;
  try {
    s = decodeURIComponent(fragment);
  } catch {
    throw new LinkError("is not a share link (a %-escape in it is broken)");
  }
  s = s.replace(/-/g, "+").replace(/_/g, "/").replace(/=+$/, "");
  if (!/^[A-Za-z0-9+/]*$/.test(s) || s.length % 4 === 1) {
    throw new LinkError("is not a share link (it is not base64url)");
  }
  const size = Math.floor((s.length * 3) / 4);
  if (size > limits.max_text_bytes) throw new LinkError(sizeRule(size, limits.max_text_bytes));
  const text = utf8(Uint8Array.from(atob(s + "=".repeat((4 - (s.length % 4)) % 4)), (c) => c.charCodeAt(0)));
  if (text === null) throw new LinkError("is not UTF-8");
  const problem = textProblem(text, limits);
  if (problem) throw new LinkError(problem);
  return text;
}

// The scenario text in the page address, or null when there is none; throws LinkError.
export function scenarioTextInAddress(limits) {
  const m = location.hash.match(/^#s=(.*)$/s);
  return m ? scenarioText(m[1], limits) : null;
}
