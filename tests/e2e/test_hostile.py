"""Hostile input (issue 9): share links, pastes, opened files and this browser's saved entries
that are nested thousands deep, too large, not UTF-8, not JSON, of the wrong types, of another
schema version, with unknown fields or markup in them.

Each is refused as the command line refuses it: calc's message naming the field (beside it, or
in the status line for the whole scenario), kept until the user changes something; the page
still computes the next valid input. Throughout, the fixture checks that no script of theirs ran
(the `window.__pwned` trap their markup aims at), that no request left the page's origin and
that no Content-Security-Policy violation was reported.
"""

from __future__ import annotations

import base64
import importlib.util
import json
from pathlib import Path
from typing import Any

import pytest

from calc import estimate
from calc.cli import main
from calc.reading import MAX_CONFIG_BYTES, MAX_DEPTH, MAX_TEXT_BYTES

from .conftest import LIVE_TIMEOUT_MS, ROOT, SITE, Calculator, encode
from .test_calculator import page_data

TRAP = '<img src=x onerror="window.__pwned=1">'  # markup that runs a script if it is ever parsed
FETCH = '<img src="https://evil.example/pixel.png">'  # markup that sends a request elsewhere
DEEP = "[" * 3000 + "]" * 3000  # Pyodide's JSON decoder overflowed its stack on this
VALID = {"model": "qwen2.5-0.5b", "training": {"seq_len": 1024}, "gpu": "l4-24gb"}
GOOD_ENTRY = {"name": "good one", "scenario": VALID, "device_bytes": 1}


def link(text: str | bytes) -> str:
    """A share link's fragment carrying `text` as it is (not re-serialised)."""
    data = text.encode() if isinstance(text, str) else text
    return "#s=" + base64.urlsafe_b64encode(data).decode().rstrip("=")


# (name, the link's scenario text, the field calc names, words of its rule)
LINKS = [
    ("nested-3000-deep", f'{{"model": {{"hf_config": {DEEP}}}, "gpu": "a100-80gb"}}',
     "scenario", f"nested more than {MAX_DEPTH} levels deep"),
    ("object-for-a-number", '{"model": "gpt2", "training": {"seq_len": {"toString": 1}}}',
     "training.seq_len", "must be an integer"),
    ("schema-version-0", '{"schema_version": 0, "model": "gpt2", "training": {"seq_len": 512}}',
     "schema_version", "must be a positive integer, got 0"),
    ("schema-version-2", '{"schema_version": 2, "model": "gpt2", "training": {"seq_len": 512}}',
     "schema_version", "newer than this calc understands"),
    ("schema-version-string", '{"schema_version": "1", "model": "gpt2", "training": {"seq_len": 512}}',
     "schema_version", "got '1'"),
    ("unknown-field", '{"model": "gpt2", "training": {"seq_len": 512}, "bogus": 1}',
     "bogus", "is not a known field"),
    ("unknown-nested-field", '{"model": "gpt2", "training": {"seq_len": 512, "bogus": 1}}',
     "training.bogus", "is not a known field"),
    ("repeated-key", '{"model": "gpt2", "model": "gpt2"}', "scenario", "repeats the key 'model'"),
    ("nan", '{"model": "gpt2", "training": {"seq_len": NaN}}', "training.seq_len", "got nan"),
    ("bool-for-an-int", '{"model": "gpt2", "training": {"seq_len": 512, "micro_batch_size": true}}',
     "training.micro_batch_size", "got true"),
    ("a-list", "[1, 2]", "scenario", "must be a JSON object"),
    ("not-json", "{not json", "scenario", "is not valid JSON"),
    ("proto-keys", '{"model": "gpt2", "__proto__": {"polluted": 1}, "training": {"seq_len": 512}}',
     "__proto__", "is not a known field"),
    ("markup-in-gpu", json.dumps({"model": "gpt2", "training": {"seq_len": 512}, "gpu": TRAP}),
     "gpu", "unknown gpu preset"),
    ("markup-in-model", json.dumps({"model": TRAP + FETCH, "training": {"seq_len": 512}}),
     "model", "unknown"),
    ("markup-in-precision", json.dumps({"model": "gpt2", "training": {"seq_len": 512, "precision": TRAP}}),
     "training.precision", "must be"),
    ("markup-in-config", json.dumps({"model": {"hf_config": {"model_type": TRAP + FETCH, "hidden_size": 64}}}),
     "model.hf_config.num_hidden_layers", "is required"),
]
# A link calc accepts, with markup in a string it keeps: shown as text wherever it is shown.
MARKED_CONFIG = {"model": {"hf_config": {"model_type": TRAP + FETCH, "hidden_size": 64, "num_hidden_layers": 2,
                                         "num_attention_heads": 2, "intermediate_size": 128, "vocab_size": 100}},
                 "gpu": "l4-24gb"}
# Links the page refuses before reading them: (name, fragment, words)
UNREADABLE = [
    ("not-base64", "#s=!!!not-base64!!!", "is not a share link"),
    ("broken-escape", "#s=%E0%A4%A", "is not a share link"),
    ("not-utf8", link(b'{"model": "\xff\xfe"}'), "is not UTF-8"),
    ("too-large", link('{"model": "gpt2", "pad": "%s"}' % ("x" * MAX_TEXT_BYTES)),
     f"at most {MAX_TEXT_BYTES:,} are read"),
]


def worker() -> Any:
    """The browser worker's module (site/calculator/calc_worker.py), in CPython."""
    spec = importlib.util.spec_from_file_location("calc_worker", ROOT / "site" / "calculator" / "calc_worker.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize(("name", "text", "where", "words"), LINKS[1:], ids=[x[0] for x in LINKS[1:]])
def test_the_page_reads_a_link_as_the_command_line_reads_a_file(
        name: str, text: str, where: str, words: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """What the page hands a link's text to (calc_worker.call_scenario_text) says what
    `calc estimate FILE` says, word for word: one contract. (The first link, 3000 deep, the page
    refuses itself; the library's json cannot even parse it to compare.)"""
    path = tmp_path / "scenario.json"
    path.write_text(text)
    assert main(["estimate", str(path)]) == 2
    said = capsys.readouterr().err.strip()
    answer = json.loads(worker().call_scenario_text("estimate", "{}", text))
    assert said == f"calc: error: {answer['field']}: {answer['message']}"
    assert (answer["field"], words in answer["message"]) == (where, True)


def test_the_pages_embed_calcs_reading_bounds() -> None:
    """The page's checks read calc.reading's bounds from the data the build embeds."""
    bounds = {"max_depth": MAX_DEPTH, "max_text_bytes": MAX_TEXT_BYTES, "max_config_bytes": MAX_CONFIG_BYTES}
    assert page_data()["limits"] == bounds
    formulas = (SITE / "reference" / "formulas" / "index.html").read_text()
    data = formulas.split('<script type="application/json" id="formula-data">')[1].split("</script>")[0]
    assert json.loads(data.replace("<\\/", "</"))["limits"] == bounds


def status(calc: Calculator) -> str:
    return calc.page.inner_text("#calc-status")  # type: ignore[no-any-return]


def wait_status(calc: Calculator, *words: str) -> str:
    calc.page.wait_for_function(
        "words => words.every(w => document.getElementById('calc-status').textContent.includes(w))",
        arg=list(words), timeout=LIVE_TIMEOUT_MS)
    return status(calc)


def wait_python(calc: Calculator) -> None:
    calc.page.wait_for_function("() => window.calcLive && window.calcLive.worker !== null",
                               timeout=LIVE_TIMEOUT_MS)


def computes_the_next_valid_input(calc: Calculator) -> None:
    """The user fixes the form (the model, the sequence length): it is computed, as CPython does."""
    calc.field("model").select_option("qwen2.5-0.5b")
    calc.field("training.seq_len").fill("1024")
    calc.field("gpu").select_option("l4-24gb")
    report = calc.page.wait_for_function(
        """() => { const el = document.getElementById('estimate-json');
            if (el.dataset.state !== 'live') return null;
            const r = JSON.parse(el.textContent);
            return r.scenario.model === 'qwen2.5-0.5b' && r.scenario.training.seq_len === 1024
              && r.scenario.gpu === 'l4-24gb' ? r : null; }""", timeout=LIVE_TIMEOUT_MS).json_value()
    assert report["device_bytes"] == estimate(report["scenario"]).device_bytes
    assert "Live" in status(calc)


@pytest.mark.parametrize("name", ["nested-3000-deep", "object-for-a-number", "schema-version-string"])
def test_a_hostile_link_on_load_is_refused_and_the_page_works_on(calculator: Calculator, name: str) -> None:
    """Opened from a hostile link, the page loads, says what calc refuses and keeps saying it
    once Python is ready (it was "loading" forever, or replaced by "Live" over the default, or
    Pyodide died); the link stays in the address; the next valid input is computed."""
    _, text, where, words = next(x for x in LINKS if x[0] == name)
    calculator.page.goto(calculator.base_url + "calculator/" + link(text))
    wait_python(calculator)
    said = wait_status(calculator, "was not applied", f"{where}: ", words)
    calculator.page.wait_for_timeout(500)  # nothing replaces it
    assert status(calculator) == said
    assert calculator.page.get_attribute("#estimate-json", "data-state") == "static"
    assert calculator.page.evaluate("location.hash") == link(text)
    if where == "training.seq_len":
        assert calculator.field(where).get_attribute("aria-invalid") == "true"
        note = calculator.page.inner_text("#" + calculator.field(where).get_attribute("aria-describedby"))
        assert words in note
    computes_the_next_valid_input(calculator)


def test_every_hostile_link_is_refused_with_calcs_words(calculator: Calculator) -> None:
    """Each link, followed in turn in one page: calc's field and rule (as `calc estimate` says
    them) in the status line, the result left as it was, no script run, no request sent."""
    calculator.open(VALID)
    before = calculator.report()
    for name, text, where, words in LINKS:
        calculator.page.evaluate("h => { location.hash = h; }", link(text))
        said = wait_status(calculator, "was not applied", f"{where}: ", words)
        assert "Live" not in said, name
        assert calculator.report() == before, name
    for name, fragment, words in UNREADABLE:
        calculator.page.evaluate("h => { location.hash = h; }", fragment)
        wait_status(calculator, "was not applied", "scenario: ", words)
        assert calculator.report() == before, name
    assert calculator.page.evaluate("({}).polluted") is None
    calculator.page.evaluate("h => { location.hash = h; }", f"#s={encode(MARKED_CONFIG)}")
    report = calculator.wait_report_for(estimate(MARKED_CONFIG).as_dict()["scenario"])
    assert report["device_bytes"] == estimate(MARKED_CONFIG).device_bytes
    assert json.loads(calculator.field("model.hf_config").input_value())["model_type"] == TRAP + FETCH
    computes_the_next_valid_input(calculator)


def test_a_valid_link_after_hostile_ones_is_computed(calculator: Calculator) -> None:
    calculator.page.goto(calculator.base_url + "calculator/" + link(LINKS[0][1]))
    wait_python(calculator)
    wait_status(calculator, "was not applied")
    scenario = {"model": "qwen2.5-1.5b", "training": {"seq_len": 2048}, "gpu": "a100-40gb"}
    calculator.page.evaluate("h => { location.hash = h; }", f"#s={encode(scenario)}")
    report = calculator.wait_report_for(estimate(scenario).as_dict()["scenario"])
    assert report == json.loads(json.dumps(estimate(scenario).as_dict()))
    assert calculator.field("training.seq_len").input_value() == "2048"


def test_hostile_pastes_are_measured_before_python(calculator: Calculator) -> None:
    """A pasted config.json nested 3000 deep or over calc's size bound is named beside the box
    and never reaches Python; so is one in the import panel. Python keeps answering."""
    calculator.open()
    box = calculator.field("model.hf_config")
    for text, words in [(DEEP, f"nested more than {MAX_DEPTH} levels deep"),
                        ('{"model_type": "llama", "pad": "%s"}' % ("x" * MAX_TEXT_BYTES), "are read"),
                        (json.dumps({"model_type": TRAP + FETCH}), "is required")]:
        box.fill(text)
        calculator.page.wait_for_function(
            "w => document.getElementById('e-model-hf_config').textContent.includes(w)",
            arg=words, timeout=LIVE_TIMEOUT_MS)
        assert box.get_attribute("aria-invalid") == "true"
    page = calculator.page
    page.click("#calc-import summary")
    for text, words in [(DEEP, "levels deep"), ("x" * (MAX_TEXT_BYTES + 1), "are read")]:
        page.fill("#t-import-text", text)
        page.click("#calc-import-form button[type=submit]")
        page.wait_for_function("w => document.getElementById('te-import-text').textContent.includes(w)",
                               arg=words, timeout=LIVE_TIMEOUT_MS)
    assert page.get_attribute("#calc-import-json", "data-runs") == "0"  # none reached calc
    computes_the_next_valid_input(calculator)


def test_hostile_files_are_refused_and_a_good_one_opens(calculator: Calculator, tmp_path: Path) -> None:
    calculator.open(VALID)
    before = calculator.report()
    files = [
        ("deep.json", DEEP.encode(), f"nested more than {MAX_DEPTH} levels deep"),
        ("latin1.json", '{"model": "caf\xe9"}'.encode("latin-1"), "is not UTF-8"),
        ("huge.json", b'{"pad": "' + b"x" * MAX_TEXT_BYTES + b'"}', "are read"),
        (f"{TRAP}.json", b'{"schema_version": 2, "model": "gpt2"}', "newer than"),
        ("array.json", b"[]", "must be a JSON object"),
    ]
    for name, data, words in files:
        path = tmp_path / name.replace("/", "_")
        path.write_bytes(data)
        calculator.page.set_input_files("#calc-upload", str(path))
        said = wait_status(calculator, "was not applied", words)
        assert path.name in said
        assert calculator.report() == before
    other = {**VALID, "training": {"seq_len": 512}}
    path = tmp_path / "good.json"
    path.write_text(json.dumps(other))
    calculator.page.set_input_files("#calc-upload", str(path))
    assert calculator.wait_report_for(estimate(other).as_dict()["scenario"])["device_bytes"] == \
        estimate(other).device_bytes


def set_storage(calc: Calculator, items: dict[str, str]) -> None:
    """Set before the calculator loads (from another page of the site: the same origin)."""
    calc.page.goto(calc.base_url)
    calc.page.evaluate("items => { for (const [k, v] of Object.entries(items)) localStorage.setItem(k, v); }", items)


def storage(calc: Calculator, key: str) -> Any:
    return calc.page.evaluate("k => localStorage.getItem(k)", key)


def test_unreadable_saved_scenarios_are_set_aside_not_deleted(calculator: Calculator) -> None:
    """`{not json` as the saved list (and as the set-aside list itself): the page loads and
    works, the text is kept aside with a message, can be downloaded as it was, and is gone only
    when discarded."""
    set_storage(calculator, {"calc.saved-scenarios": "{not json", "calc.set-aside": "{also not json"})
    calculator.open(VALID)
    page = calculator.page
    aside = page.inner_text("#calc-aside")
    assert "Saved scenarios" in aside and "is not valid JSON" in aside
    assert "The set-aside list" in aside and "could not be read" in aside
    texts = [r["text"] for r in json.loads(storage(calculator, "calc.set-aside"))]
    assert texts == ["{also not json", "{not json"]
    with page.expect_download() as info:
        page.click("[data-aside-download='1']")
    assert Path(info.value.path()).read_text() == "{not json"
    page.click("#calc-save")  # saving works again, and the set-aside texts survive it
    page.wait_for_selector(".calc-saved a")
    assert [r["text"] for r in json.loads(storage(calculator, "calc.set-aside"))] == texts
    page.click("[data-aside-discard='1']")
    page.click("[data-aside-discard='0']")
    page.wait_for_selector("#calc-aside", state="detached")
    assert json.loads(storage(calculator, "calc.set-aside")) == []


def test_bad_saved_entries_are_set_aside_and_the_good_one_opens(calculator: Calculator) -> None:
    """`[null, {...good...}, ...]`: the good scenario stays listed and opens; the others are set
    aside with their reasons; markup in their names is shown as text."""
    deep_scenario = f'{{"name": "deep", "scenario": {{"model": {{"hf_config": {DEEP}}}}}}}'
    deep_extra = f'{{"name": "x", "scenario": {json.dumps(VALID)}, "junk": {DEEP}}}'
    saved = (f'[null, {json.dumps(GOOD_ENTRY)}, {deep_scenario}, '
             f'{{"name": {json.dumps(TRAP + FETCH)}, "scenario": "not an object"}}, 7, {deep_extra}]')
    pins = json.dumps([{"name": TRAP, "scenario": {"schema_version": 2, "model": "gpt2"}}, "junk"])
    earlier = f'[{{"key": {json.dumps(TRAP)}, "text": "earlier", "reasons": ["an earlier reason"], "at": {DEEP}}}]'
    set_storage(calculator, {"calc.saved-scenarios": saved, "calc.pinned-scenarios": pins,
                             "calc.set-aside": earlier})
    calculator.open(VALID)
    page = calculator.page
    links = page.locator(".calc-saved a")
    assert links.count() == 1 and links.first.text_content() == "good one"
    aside = page.inner_text("#calc-aside")
    for words in ["entry 1 is null", "entry 3 has a scenario that is nested more than",
                  "entry 4 has no scenario", "entry 5 is a number", f"entry 6 is nested more than {MAX_DEPTH + 1}",
                  "Pinned scenarios", "entry 2 is a string", TRAP, "an earlier reason"]:
        assert words in aside, words
    records = json.loads(storage(calculator, "calc.set-aside"))
    assert {r["text"] for r in records} == {saved, pins, "earlier"}  # kept as they were
    assert json.loads(storage(calculator, "calc.saved-scenarios")) == [GOOD_ENTRY]
    # the pinned entry with markup in its name: compared by calc, refused, its name as text
    page.wait_for_function("() => document.getElementById('calc-compare').textContent.includes('schema_version')",
                           timeout=LIVE_TIMEOUT_MS)
    assert TRAP in page.inner_text("#calc-compare")
    links.first.click()
    report = calculator.wait_report_for(estimate(VALID).as_dict()["scenario"])
    assert report["device_bytes"] == estimate(VALID).device_bytes


def test_show_the_math_refuses_hostile_links_and_computes_the_next(calculator: Calculator) -> None:
    page = calculator.page
    page.goto(calculator.base_url + "reference/formulas/" + link(LINKS[0][1]))
    page.wait_for_function("() => document.getElementById('formula-status').dataset.kind === 'error'",
                           timeout=LIVE_TIMEOUT_MS)
    assert f"nested more than {MAX_DEPTH} levels deep" in page.inner_text("#formula-status")
    for _, text, where, words in LINKS[1:3]:
        page.evaluate("h => { location.hash = h; }", link(text))
        page.wait_for_function(
            "w => document.getElementById('formula-status').textContent.includes(w)",
            arg=f"{where}: {words}", timeout=LIVE_TIMEOUT_MS)
        assert page.get_attribute("#explain-json", "data-state") == "static"
    page.evaluate("h => { location.hash = h; }", f"#s={encode(VALID)}")
    page.wait_for_selector("#explain-json[data-state=live]", state="attached", timeout=LIVE_TIMEOUT_MS)


@pytest.mark.console_errors_expected  # Pyodide logs its own fatal error
def test_python_dying_is_survived_the_form_kept_and_computed(calculator: Calculator) -> None:
    """If Pyodide still dies (here: made to, past the page's checks), the next calculation
    starts a new worker, says so, and computes the form as it is."""
    calculator.open(VALID)
    page = calculator.page
    died = page.evaluate("""async (deep) => {
        try { await window.calcLive.worker.worker.sync.call('estimate', deep); return false; }
        catch (e) { return String(e.message || e); } }""", '{"scenario": %s}' % ("[" * 100000 + "]" * 100000))
    assert died, "Python survived the overflow: the test no longer kills it"
    calculator.field("training.seq_len").fill("512")
    scenario = {**VALID, "training": {"seq_len": 512}}
    report = calculator.wait_report_for(
        {**calculator.report()["scenario"], "training": {**calculator.report()["scenario"]["training"], "seq_len": 512}})
    assert report["device_bytes"] == estimate(scenario).device_bytes
    assert "restarted" in status(calculator)
    assert calculator.field("gpu").input_value() == "l4-24gb"  # the form was kept


def test_the_policy_blocks_injected_markup(calculator: Calculator) -> None:
    """Were markup ever to get past the page's escaping, the Content-Security-Policy stops it:
    no inline handler runs, nothing is fetched from elsewhere."""
    calculator.open(live=False)
    handler = '<img src="data:," onerror="window.__pwned = 1">'  # a broken image, from this page
    calculator.page.evaluate("html => { document.getElementById('calc-status').innerHTML = html; }",
                             handler + FETCH + "<script>window.__pwned = 2</script>")
    calculator.page.wait_for_timeout(300)
    assert calculator.pwned() is None
    assert any("script-src" in v for v in calculator.csp_violations)
    assert any("img-src" in v and "evil.example" in v for v in calculator.csp_violations)
    assert not calculator.foreign_requests
    calculator.csp_violations.clear()  # expected here: the fixture fails on any other


def built_pages() -> list[str]:
    pages = sorted(p.relative_to(SITE).as_posix() for p in SITE.rglob("*.html")
                   if not p.relative_to(SITE).as_posix().startswith("vendor/"))
    return [p.removesuffix("index.html") for p in pages]


def test_every_page_loads_under_its_content_security_policy(calculator: Calculator) -> None:
    """Every built page has the policy, and loads, scripts and styles included, without one
    violation (the fixture fails on any, and on console errors)."""
    page = calculator.page
    pages = built_pages()
    assert len(pages) > 20
    for path in pages:
        page.goto(calculator.base_url + path, wait_until="load")
        policy = page.get_attribute('meta[http-equiv="Content-Security-Policy"]', "content")
        assert policy and "default-src 'self'" in policy, path
    page.goto(calculator.base_url + "reference/formulas/")
    page.wait_for_selector(".arithmatex .katex", timeout=10_000)  # KaTeX styles apply
