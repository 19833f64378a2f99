"""tools/bytecode.py: the wheels the site ships carry bytecode that Python really uses.

The site runs it inside Pyodide (CPython 3.14); here it runs in the test interpreter, which makes
bytecode for itself, so the same claims can be checked by importing the result."""

from __future__ import annotations

import importlib
import sys
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tools"))
from bytecode import add_bytecode, imported_sources, pyc_name

RECORD = "demo-1.0.dist-info/RECORD"


def make_wheel(path: Path, files: dict[str, str]) -> Path:
    with zipfile.ZipFile(path, "w") as z:
        for name, text in files.items():
            z.writestr(name, text)
        z.writestr("demo-1.0.dist-info/METADATA", "Metadata-Version: 2.1\nName: demo\nVersion: 1.0\n")
        z.writestr(RECORD, "".join(f"{n},,\n" for n in files) + f"{RECORD},,\n")
    return path


def install(wheel: Path, into: Path) -> None:
    with zipfile.ZipFile(wheel) as z:
        z.extractall(into)


@pytest.fixture
def site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    target = tmp_path / "site"
    target.mkdir()
    monkeypatch.syspath_prepend(str(target))
    yield target
    for name in [m for m in sys.modules if m.split(".")[0] in ("demo", "dep")]:
        del sys.modules[name]


def test_python_imports_the_shipped_bytecode_not_the_source(tmp_path: Path, site: Path) -> None:
    """Unchecked hash-based .pyc: used even though unpacking gives the source a new mtime, so
    a source edited after compiling proves which one Python ran."""
    wheel = make_wheel(tmp_path / "demo-1.0-py3-none-any.whl",
                       {"demo/__init__.py": "", "demo/mod.py": "WHERE = 'compiled'\n"})
    assert add_bytecode(wheel) == 2
    install(wheel, site)
    (site / "demo" / "mod.py").write_text("WHERE = 'source'\n")
    importlib.invalidate_caches()
    assert importlib.import_module("demo.mod").WHERE == "compiled"


def test_record_lists_every_added_file_with_its_hash(tmp_path: Path) -> None:
    wheel = make_wheel(tmp_path / "demo-1.0-py3-none-any.whl", {"demo/__init__.py": "X = 1\n"})
    add_bytecode(wheel)
    with zipfile.ZipFile(wheel) as z:
        names = set(z.namelist())
        record = z.read(RECORD).decode().splitlines()
    pyc = pyc_name("demo/__init__.py")
    assert pyc in names
    (line,) = [r for r in record if r.startswith(pyc + ",")]
    assert line.split(",")[1].startswith("sha256=") and int(line.split(",")[2]) > 0
    assert record[-1] == f"{RECORD},,"


def test_only_the_selected_modules_are_compiled_and_rerunning_changes_nothing(tmp_path: Path) -> None:
    wheel = make_wheel(tmp_path / "demo-1.0-py3-none-any.whl",
                       {"demo/__init__.py": "", "demo/used.py": "", "demo/unused.py": ""})
    assert add_bytecode(wheel, {"demo/__init__.py", "demo/used.py"}) == 2
    with zipfile.ZipFile(wheel) as z:
        names = set(z.namelist())
    assert pyc_name("demo/used.py") in names and pyc_name("demo/unused.py") not in names
    before = wheel.read_bytes()
    assert add_bytecode(wheel, {"demo/__init__.py", "demo/used.py"}) == 0
    assert wheel.read_bytes() == before


def test_imported_sources_are_the_dependencies_that_the_package_and_the_run_load(
        site: Path) -> None:
    files = {"demo/__init__.py": "", "demo/core.py": "import dep.used\n",
             "dep/__init__.py": "", "dep/used.py": "", "dep/lazy.py": "", "dep/unused.py": ""}
    for name, text in files.items():
        (site / name).parent.mkdir(exist_ok=True)
        (site / name).write_text(text)
    found = imported_sources(site, "demo", "import dep.lazy")
    assert found == set(files) - {"dep/unused.py"}
