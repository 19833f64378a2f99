"""Add compiled bytecode to wheels, for the interpreter that runs this module.

    add_bytecode(Path("pydantic-2.14.3-py3-none-any.whl"), only)   # rewrites the wheel in place

Why: a wheel holds `.py` sources, so every start of Python in the browser compiles pydantic and
calc again (measured on the site: about 0.7 s of the 1 s that importing calc takes under
Pyodide). tools/vendor_assets.py therefore runs this module *inside the vendored Pyodide* under
Node (tools/bytecode.mjs), so the bytecode is exactly what the browser's CPython 3.14 expects,
and ships the wheels with `__pycache__/*.cpython-314.pyc` next to each source. The Pyodide project
does the same to every package it distributes.

Only the modules the calculator imports get bytecode (`imported_sources`, measured by importing
all of calc and running one estimate): pydantic's wheel alone has 106 modules, most of them never
imported here (its v1 copy, deprecated APIs, plugins), and each compiled module adds to the
download.

The `.pyc` files are hash-based and *unchecked* (PEP 552): Python uses them without reading the
source or comparing timestamps, which change when Pyodide unpacks a wheel. Sources stay in the
wheel for tracebacks and `inspect`. RECORD lists the new files with their hashes, so the wheel
stays a valid wheel.
"""

from __future__ import annotations

import base64
import hashlib
import importlib
import importlib.util
import marshal
import pkgutil
import sys
import zipfile
from collections.abc import Container
from pathlib import Path, PurePosixPath

HASH_BASED_UNCHECKED = (1).to_bytes(4, "little")  # PEP 552 flags: bit 0 hash-based, bit 1 unset


def pyc_name(source: str) -> str:
    """`pkg/mod.py` -> `pkg/__pycache__/mod.<cache tag>.pyc`, the name the importer looks for."""
    path = PurePosixPath(source)
    return str(path.parent / "__pycache__" / f"{path.stem}.{sys.implementation.cache_tag}.pyc")


def _record_line(name: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{name},sha256={digest},{len(data)}"


def imported_sources(site_packages: Path, package: str, run: str) -> set[str]:
    """The sources under `site_packages` (as wheel paths, `pkg/mod.py`) loaded by importing every
    module of `package` and then running the statement `run`."""
    root = importlib.import_module(package)
    for info in pkgutil.walk_packages(root.__path__, f"{package}."):
        importlib.import_module(info.name)
    exec(run, {})
    found = set()
    for module in list(sys.modules.values()):
        file = getattr(module, "__file__", None)
        if file and file.endswith(".py") and Path(file).is_relative_to(site_packages):
            found.add(Path(file).relative_to(site_packages).as_posix())
    return found


def add_bytecode(wheel: Path, only: Container[str] | None = None) -> int:
    """Rewrite `wheel` with a compiled `.pyc` beside each `.py` of its packages (of those in
    `only`, when given); returns how many.

    Sources under `*.dist-info/` and `*.data/` are not importable and stay uncompiled; a wheel
    that already has the bytecode is left unchanged (the count is then 0)."""
    with zipfile.ZipFile(wheel) as z:
        entries = [(info, z.read(info)) for info in z.infolist()]
    names = {info.filename for info, _ in entries}
    record = next(n for n in names if n.endswith(".dist-info/RECORD"))
    compiled: list[tuple[str, bytes]] = []
    for info, data in entries:
        name = info.filename
        top = name.split("/", 1)[0]
        if not name.endswith(".py") or top.endswith((".dist-info", ".data")):
            continue
        if only is not None and name not in only:
            continue
        if pyc_name(name) in names:
            continue
        code = compile(data, name, "exec", dont_inherit=True)
        pyc = (importlib.util.MAGIC_NUMBER + HASH_BASED_UNCHECKED
               + importlib.util.source_hash(data) + marshal.dumps(code))
        compiled.append((pyc_name(name), pyc))
    if not compiled:
        return 0
    tmp = wheel.with_suffix(".tmp")
    with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as out:
        for info, data in entries:
            if info.filename == record:
                lines = data.decode().rstrip("\n").split("\n")
                lines[-1:-1] = [_record_line(n, d) for n, d in compiled]  # RECORD's own line last
                data = ("\n".join(lines) + "\n").encode()
            out.writestr(info, data)
        for name, data in compiled:
            out.writestr(zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0)), data,
                         zipfile.ZIP_DEFLATED)
    tmp.replace(wheel)
    return len(compiled)

