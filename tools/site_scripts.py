"""How the site's third-party scripts load (tools/site_hooks.py calls these), to keep their
start-up work off a page's load (issue 13: no main-thread task over 50 ms while the calculator
loads). Material's and PyScript's code is used as released; the build adds one comment line
to two of their files.

- **Material's search index is built on first use.** Material's bundle starts its search worker
  on every page load and has it build a lunr index from the whole search_index.json at once.
  Each page's `__config` names site/assets/search_worker.js as the search worker instead; it
  starts Material's own worker, whose file name the build writes into it, at the first query
  with text (the file says how).
- **Compile hints.** Material's bundle and PyScript's core are one script each whose evaluation
  is one main-thread task, much of it V8 compiling each function as it was first called. A
  file that starts with the comment `//# allFunctionsCalledOnLoad` has every function compiled
  eagerly, on a background thread while it streams in (V8's explicit compile hints,
  https://v8.dev/blog/explicit-compile-hints, Chromium 136 and later; other engines read a
  comment). Material's source map moves down the one line.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from mkdocs.exceptions import PluginError

COMPILE_HINT = "//# allFunctionsCalledOnLoad\n"
SEARCH_WORKER = "assets/search_worker.js"  # ours, in the built site
# Material's search worker in its __config (the page's relative path to the site root before it)
MATERIAL_SEARCH = re.compile(r'("search":\s*")([^"]*)assets/(javascripts/workers/search\.[0-9a-f]+\.min\.js)"')
PLACEHOLDER = re.compile(r"/\*MATERIAL WORKER\*/.*?/\*END MATERIAL WORKER\*/", re.S)


def search_on_first_use(page_html: str) -> str:
    """The page with Material's search worker in its `__config` replaced by SEARCH_WORKER."""
    out, found = MATERIAL_SEARCH.subn(lambda m: f'{m.group(1)}{m.group(2)}{SEARCH_WORKER}"', page_html)
    if found != 1:
        raise PluginError(f"expected Material's search worker once in a page's __config, found {found}: "
                          "update MATERIAL_SEARCH (tools/site_scripts.py) to Material's base.html")
    return out


def finish(site: Path) -> None:
    """After the build: our search worker told Material's worker's file; the compile hints."""
    workers = sorted((site / "assets" / "javascripts" / "workers").glob("search.*.min.js"))
    if len(workers) != 1:
        raise PluginError(f"expected one Material search worker in the built site, found {workers}")
    ours = site / SEARCH_WORKER
    text, found = PLACEHOLDER.subn(json.dumps(workers[0].relative_to(site / "assets").as_posix()),
                                   ours.read_text())
    if found != 1:
        raise PluginError(f"{SEARCH_WORKER} has no /*MATERIAL WORKER*/ placeholder")
    ours.write_text(text)
    (bundle,) = (site / "assets" / "javascripts").glob("bundle.*.min.js")
    hint(bundle)
    source_map = bundle.with_name(bundle.name + ".map")
    if source_map.is_file():
        data = json.loads(source_map.read_text())
        data["mappings"] = ";" + data["mappings"]  # every generated line is one further down
        source_map.write_text(json.dumps(data))
    # PyScript's entry point (core.js) is a few lines importing its core chunk: hint that chunk.
    pyscript = site / "vendor" / "pyscript"
    chunks = re.findall(r'from\s*"\./(core-[\w-]+\.js)"', (pyscript / "core.js").read_text())
    if len(chunks) != 1:
        raise PluginError(f"expected vendor/pyscript/core.js to import one core chunk, found {chunks}")
    hint(pyscript / chunks[0])


def hint(script: Path) -> None:
    text = script.read_text(encoding="utf-8")
    if not text.startswith(COMPILE_HINT):
        script.write_text(COMPILE_HINT + text, encoding="utf-8")
