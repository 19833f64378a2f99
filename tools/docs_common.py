"""Shared helpers of the documentation pages: how a number is written, and links to the calculator.

Every number a page shows goes through these functions at build time, so prose and tables use
one format, calc.formatting's (the command line's and the calculator's): GiB with two decimals
(bytes / 1024**3), percentages with one, parameter counts to three significant figures.
"""

from __future__ import annotations

import base64
import html
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
    shown = re.sub(r"<[^>]*>", "", shown)  # and markup as nothing (breakable_code's pieces)
    return f'<span class="cell-prose">{cell}</span>' if len(shown) > PROSE_CHARS else cell


def breakable_code(text: str, at: str, title: str | None = None,
                   keep: tuple[str, ...] = (), lead: str | None = None) -> str:
    """`text` as code that a narrow column may wrap only after one of the characters `at` (a
    path's `/` or `.`, an id's `_` or `-`), never inside a name, nor inside one of the names
    in `keep` that contain such a character: each piece is kept whole (`code > span`, nowrap
    in site/assets/docs.css) and a `<wbr>` follows it. A table cell's code otherwise never
    wraps, so one long path or id set the width of its whole column (issue 13: the formula
    reference's `booked under` was 286 px wide at 1366 px). `lead`: a class for the first
    piece (`.id-head`: a case id's model, on a line of its own)."""
    seps = f"[{re.escape(at)}]"
    whole = "".join(f"{re.escape(k)}|" for k in keep)
    pieces = re.findall(rf"(?:{whole}(?!{seps}).)+{seps}*|{seps}+", text)
    hover = f' title="{html.escape(title)}"' if title else ""
    classes = [f' class="{lead}"' if lead and k == 0 else "" for k in range(len(pieces))]
    return (f"<code{hover}>" + "<wbr>".join(f"<span{c}>{html.escape(p)}</span>"
                                          for c, p in zip(classes, pieces, strict=True))
            + "</code>")


def md_table(header: list[str], rows: list[list[str]], align: str | None = None, *,
             narrow: tuple[str, ...] = ()) -> str:
    """A Markdown table; `align` is one letter per column (l, r, c). The columns named in
    `narrow` (lists of short items, names) are not sentences: however long, their cells wrap
    at about 9em (`.cell-narrow` in site/assets/docs.css), not at a sentence's width, so that a
    table of many such columns still fits a laptop's column."""
    marks = {"l": ":--", "r": "--:", "c": ":-:"}
    sep = [marks[a] for a in align] if align else ["---"] * len(header)
    is_narrow = [name in narrow for name in header]
    lines = ["| " + " | ".join(header) + " |", "| " + " | ".join(sep) + " |"]
    lines += ["| " + " | ".join(f'<span class="cell-narrow">{c}</span>' if n else _prose(c)
                                for c, n in zip(r, is_narrow, strict=True)) + " |"
              for r in rows]
    return "\n".join(lines)


def item_list(pieces: list[str]) -> str:
    """A list of short items (`bf16 989`) for a table cell: it wraps between items, never
    inside one (their spaces are non-breaking)."""
    return ", ".join(piece.replace(" ", "\u00a0") for piece in pieces)
