"""Write the service worker's precache list and version into a built site (after `mkdocs build`).

    python tools/precache.py [build/site]

`site/sw.js` is copied into the site as is, with `const MANIFEST = /*PRECACHE*/ null /*END
PRECACHE*/;`. This replaces the `null` with {"version", "built", "files"}: every file the site
serves (pages as their directory URL, "calculator/" for "calculator/index.html"; the vendored
Pyodide runtime and its start-up snapshot, PyScript, the wheels, pyodide-lock.json, Material's
assets), relative to the site root, and a version that is a hash of their contents. Any change to any file therefore changes
sw.js, which is how browsers notice a new deployment.

Left out: source maps, the sitemaps, lunr's language packs (English search needs none of them),
and sw.js itself. The start-up snapshot (about 6 MiB compressed) is in, deliberately: with it an
offline or repeat visit starts Python in a fraction of the time. Its price is paid once, in the
background after the first visit, when the install fetches every listed file again (measured
with tools/serve.py, which answers those revalidations in full).
"""

from __future__ import annotations

import hashlib
import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SKIP_NAMES = {"sw.js", "sitemap.xml", "sitemap.xml.gz"}
SKIP_SUFFIXES = (".map",)
SKIP_DIRS = ("assets/javascripts/lunr/",)
PLACEHOLDER = re.compile(r"/\*PRECACHE\*/.*?/\*END PRECACHE\*/", re.S)


def files(site: Path) -> list[str]:
    out = []
    for f in sorted(site.rglob("*")):
        rel = f.relative_to(site).as_posix()
        if (not f.is_file() or f.name in SKIP_NAMES or rel.endswith(SKIP_SUFFIXES)
                or rel.startswith(SKIP_DIRS)):
            continue
        out.append(rel)
    return out


def url_of(rel: str) -> str:
    """The URL a page is requested by: "calculator/index.html" -> "calculator/", "index.html" -> "./"."""
    if rel == "index.html":
        return "./"
    if rel.endswith("/index.html"):
        return rel.removesuffix("index.html")
    return rel


def manifest(site: Path) -> dict[str, object]:
    rels = files(site)
    digest = hashlib.sha256()
    for rel in rels:
        digest.update(rel.encode() + b"\0" + hashlib.sha256((site / rel).read_bytes()).digest())
    return {"version": digest.hexdigest()[:12], "files": [url_of(r) for r in rels],
            "bytes": sum((site / r).stat().st_size for r in rels)}


def main() -> None:
    site = Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "build" / "site"
    sw = site / "sw.js"
    if not sw.is_file():
        sys.exit(f"precache: {sw} is missing (is site/sw.js in the docs?)")
    text = sw.read_text()
    if not PLACEHOLDER.search(text):
        sys.exit(f"precache: {sw} has no /*PRECACHE*/ ... /*END PRECACHE*/ placeholder")
    data = manifest(site)
    body = json.dumps(data, separators=(",", ":"))
    sw.write_text(PLACEHOLDER.sub(lambda _: body, text, count=1))
    print(f"precache: {len(data['files'])} files, {data['bytes'] / 2**20:.1f} MiB, "  # type: ignore[arg-type]
          f"version {data['version']}")


if __name__ == "__main__":
    main()
