"""The GitHub workflows run what runs here: CI calls .ci/run (make test), Pages publishes `make
site`'s build/site/. Their syntax is checked against GitHub's schema by `make lint`
(check-jsonschema); these tests hold the commands and paths to the Makefile's."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from ruamel.yaml import YAML  # installed with check-jsonschema (requirements-dev.txt)

ROOT = Path(__file__).resolve().parent.parent
WORKFLOWS = ROOT / ".github" / "workflows"


def workflow(name: str) -> dict[str, Any]:
    return YAML(typ="safe").load((WORKFLOWS / name).read_text())  # type: ignore[no-any-return]


def runs(job: dict[str, Any]) -> list[str]:
    return [step["run"] for step in job["steps"] if "run" in step]


def make_targets() -> set[str]:
    return set(re.findall(r"^([a-z][a-z-]*):", (ROOT / "Makefile").read_text(), re.MULTILINE))


def test_ci_runs_the_ci_entry_point_which_runs_make_test() -> None:
    (job,) = workflow("ci.yml")["jobs"].values()
    assert runs(job) == ["bash .ci/run"]
    assert (ROOT / ".ci" / "run").read_text().strip().endswith("make test")
    assert "test" in make_targets()


def test_ci_has_what_make_test_installs_from_debian_and_node() -> None:
    """make test apt-gets chromium (Debian's, as the browser tests expect) and runs npm/node
    (vendoring and compiling the site's wheels): a Debian image with Node set up."""
    (job,) = workflow("ci.yml")["jobs"].values()
    assert "bookworm" in job["container"]["image"]
    assert any(step.get("uses", "").startswith("actions/setup-node") for step in job["steps"])


def test_pages_publishes_what_make_site_builds() -> None:
    jobs = workflow("pages.yml")["jobs"]
    assert "make site" in runs(jobs["build"])
    (upload,) = [s for s in jobs["build"]["steps"] if "upload-pages-artifact" in s.get("uses", "")]
    assert upload["with"]["path"] == "build/site"
    assert "site" in make_targets()
    # `make site` builds a stamp inside build/site whose recipe is the mkdocs build (it reruns
    # only when a source changed)
    makefile = (ROOT / "Makefile").read_text()
    assert re.search(r"^site: \$\(SITE_BUILT\)$", makefile, re.MULTILINE)
    assert re.search(r"^SITE_BUILT := build/site/", makefile, re.MULTILINE)
    assert re.search(r"^\$\(SITE_BUILT\):.*\n(?:\t.*\n)*\t.*mkdocs build", makefile, re.MULTILINE)
