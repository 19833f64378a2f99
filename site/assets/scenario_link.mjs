// The share-link format of a scenario, "#s=" + base64url of its JSON: unpadded when written;
// padding and the + / alphabet are accepted when read. The same contract as the CLI's JSON
// (tools/docs_common.py writes these links at build time).

export function encodeScenario(scenario) {
  const bytes = new TextEncoder().encode(JSON.stringify(scenario));
  let bin = "";
  for (const b of bytes) bin += String.fromCharCode(b);
  return btoa(bin).replace(/\+/g, "-").replace(/\//g, "_").replace(/=+$/, "");
}

export function decodeScenario(text) {
  let s = text.replace(/-/g, "+").replace(/_/g, "/").replace(/=+$/, "");
  s += "=".repeat((4 - (s.length % 4)) % 4);
  const bin = atob(s);
  return JSON.parse(new TextDecoder().decode(Uint8Array.from(bin, (c) => c.charCodeAt(0))));
}

// The scenario in the page address, or null when there is none; throws when it cannot be read.
export function scenarioInAddress() {
  const m = location.hash.match(/^#s=(.*)$/);
  return m ? decodeScenario(decodeURIComponent(m[1])) : null;
}
