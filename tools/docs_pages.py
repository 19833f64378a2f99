"""Placeholders in the documentation pages, rendered at build time from the estimator.

A page writes `{{ name }}` (with exactly one space inside each brace pair) where a number or a
generated table goes; the page's context function (registered in `PAGES` by its source path)
computes every name with `calc`. An unknown name fails the build, and so does a page with a
context function that leaves a placeholder unrendered, so a typo cannot ship as text.
"""

from __future__ import annotations

import importlib
import re
import sys
from functools import cache
from pathlib import Path

from mkdocs.exceptions import PluginError

PLACEHOLDER = re.compile(r"\{\{ ([A-Za-z0-9_.]+) \}\}")

# page source -> "module:function" (in tools/) computing its placeholders
PAGES: dict[str, str] = {
    "index.md": "docs_home:context",
    "accuracy.md": "docs_accuracy:context",
    "performance.md": "docs_perf:context",
    "gpus.md": "docs_gpus:context",
    "walkthroughs/fit-llama-8b-8k.md": "docs_walkthroughs:llama_8k",
    "walkthroughs/where-the-bytes-go.md": "docs_walkthroughs:qwen_bytes",
    "walkthroughs/debug-oom.md": "docs_walkthroughs:debug_oom",
    "walkthroughs/8b-to-70b.md": "docs_walkthroughs:to_70b",
    "reference/presets.md": "docs_reference:presets",
    "reference/cli.md": "docs_reference:cli",
    "reference/api.md": "docs_reference:api",
    "reference/formulas.md": "docs_reference:formulas",
    "concepts/index.md": "docs_walkthroughs:concepts",
    "tools/fit-search.md": "docs_tools:fit_search",
    "tools/recommendations.md": "docs_tools:recommendations",
    "tools/advisor.md": "docs_tools:advisor",
    "tools/compare.md": "docs_tools:comparison",
    "tools/cost.md": "docs_tools:cost",
    "tools/export.md": "docs_tools:export_page",
    "tools/kv-cache.md": "docs_tools:kv_cache",
    "tools/import.md": "docs_tools:import_page",
    "tools/cheapest.md": "docs_tools:cheapest_page",
    "tools/rl.md": "docs_tools:rl_page",
    "tools/inference.md": "docs_tools:inference_page",
}


@cache
def _context(src: str) -> dict[str, str]:
    module, function = PAGES[src].split(":")
    tools = str(Path(__file__).resolve().parent)
    if tools not in sys.path:  # mkdocs restores sys.path after loading the hooks
        sys.path.insert(0, tools)
    result: dict[str, str] = getattr(importlib.import_module(module), function)(src)
    return result


def render(src: str, markdown: str) -> str:
    names = set(PLACEHOLDER.findall(markdown))
    if not names:
        return markdown
    if src not in PAGES:
        raise PluginError(f"{src}: placeholders {sorted(names)} but no context function in "
                          "tools/docs_pages.py")
    ctx = _context(src)
    unknown = sorted(names - ctx.keys())
    if unknown:
        raise PluginError(f"{src}: unknown placeholders {unknown}")
    return PLACEHOLDER.sub(lambda m: ctx[m.group(1)], markdown)
