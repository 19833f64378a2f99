"""Shared helpers of the documentation pages: how a number is written, and links to the calculator.

Every number a page shows goes through these functions at build time, so prose and tables use
one format, calc.formatting's (the command line's and the calculator's): GiB with two decimals
(bytes / 1024**3), percentages with one, parameter counts to three significant figures.
"""

from __future__ import annotations

import base64
import json
import posixpath
import re
from typing import Any

from calc import Estimate, Scenario, formatting, parse_scenario
from calc.reading import MAX_CONFIG_BYTES, MAX_DEPTH, MAX_TEXT_BYTES

# The scenario the calculator opens on (and the GPU comparison and formula pages use): a common
# full fine-tune that fits, on 8 GPUs with ZeRO-3.
DEFAULT_SCENARIO = Scenario.model_validate({
    "model": "llama-3.1-8b",
    "training": {"seq_len": 4096, "activation_checkpointing": "full"},
    "parallelism": {"dp": 8, "zero": 3},
}).model_dump(mode="json")

# calc's bounds on text from outside (calc.reading), embedded in the pages that read such text
# (site/assets/untrusted.mjs checks them before any text reaches Python).
READING_LIMITS = {"max_depth": MAX_DEPTH, "max_text_bytes": MAX_TEXT_BYTES,
                  "max_config_bytes": MAX_CONFIG_BYTES}

def gib(n: float) -> str:
    return formatting.gib(n)


def num_gib(n: float) -> str:
    """GiB without the unit, for table columns that name it in the header."""
    return formatting.gib_number(n)


def pct(x: float, signed: bool = False) -> str:
    return f"{'+' if signed and x >= 0 else ''}{formatting.percent(x)}"


def billions(n: int) -> str:
    """A parameter count (calc.formatting.params: three significant figures, "7.62 B")."""
    return formatting.params(n)


def encode_scenario(scenario: Any) -> str:
    """What the calculator reads after `#s=`: base64url of the scenario JSON, unpadded
    (`encodeScenario` in site/assets/scenario_link.mjs). The scenario is the library's full
    normalised form, so a link means exactly what the page computed."""
    data = parse_scenario(scenario).model_dump(mode="json")
    raw = json.dumps(data, separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def calc_link(scenario: Any, page_src: str) -> str:
    """A Markdown link target from the page `page_src` (relative to docs_dir) to the calculator
    opened on `scenario`."""
    rel = posixpath.relpath("calculator/index.md", posixpath.dirname(page_src) or ".")
    return f"{rel}#s={encode_scenario(scenario)}"


def verdict(e: Estimate) -> str:
    return formatting.FIT_WORDS[e.status]


PROSE_CHARS = 60  # a cell longer than this, as read, is a sentence


def _prose(cell: str) -> str:
    """A sentence in a cell keeps a readable width (`.cell-prose` in site/assets/docs.css): a
    table wider than its column scrolls instead of squeezing it to a word per line."""
    shown = re.sub(r"\]\([^)]*\)", "]", cell)  # a link reads as its label
    return f'<span class="cell-prose">{cell}</span>' if len(shown) > PROSE_CHARS else cell


def md_table(header: list[str], rows: list[list[str]], align: str | None = None) -> str:
    """A Markdown table; `align` is one letter per column (l, r, c)."""
    marks = {"l": ":--", "r": "--:", "c": ":-:"}
    sep = [marks[a] for a in align] if align else ["---"] * len(header)
    lines = ["| " + " | ".join(header) + " |", "| " + " | ".join(sep) + " |"]
    lines += ["| " + " | ".join(map(_prose, r)) + " |" for r in rows]
    return "\n".join(lines)
