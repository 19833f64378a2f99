"""Stage everything the browser calculator loads into `vendor/site/` (git-ignored).

    python tools/vendor_assets.py        # after `npm ci`; then `mkdocs build` copies it in

What lands there, and from where:

- `pyscript/`: `@pyscript/core`'s `dist/` (npm, pinned and hashed by package-lock.json);
- `katex/`: KaTeX's script, stylesheet and fonts (npm `katex`, same lock), for the formula pages
  (site/assets/math.js renders each formula itself);
- `pyodide/`: the Pyodide runtime (npm `pyodide`, same lock) *without* its own
  `pyodide-lock.json`, which lists the Pyodide project's builds of pydantic that we do not ship;
- `pyodide/*.whl`: the Pyodide-ABI `pydantic_core` wheel and the pure wheels it needs, downloaded
  with pip at the versions `constraints.txt` pins (pip checks each file against the index's
  sha256), plus this project's own wheel built from the working tree; then each of these wheels
  gets the bytecode of the modules the calculator imports, compiled by the vendored Pyodide
  itself under Node (tools/bytecode.py), so the browser does not compile pydantic and calc at
  every start;
- `pyodide/pyodide-lock.json`: a small lock file naming exactly those wheels with their sha256.
  Pyodide reads it from its `indexURL`, checks each wheel against it, and installs them with no
  micropip and no network beyond the site itself;
- `pyodide/snapshot-KEY.bin.gz` and `pyodide/snapshot.json`: the interpreter's memory right after
  it has initialised, made by this very runtime under Node (tools/snapshot.mjs), which every
  visit restores instead of initialising CPython again (site/assets/pyodide_start.mjs).

The build fails, with the reason, when the wheels do not satisfy each other's requirements (a
pydantic / pydantic_core mismatch imports fine and breaks at the first model) or when the
pydantic_core wheel was built for another Pyodide ABI than the vendored runtime.
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import subprocess
import sys
import zipfile
from email.parser import Parser
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name, parse_wheel_filename

ROOT = Path(__file__).resolve().parent.parent
NODE = ROOT / "node_modules"
OUT = ROOT / "vendor" / "site"
CACHE = ROOT / "vendor" / "wheels"  # pip downloads, kept between builds

# Pure-Python dependencies shipped to the browser, pinned in constraints.txt.
PYODIDE_WHEELS = ("pydantic", "pydantic-core", "annotated-types", "typing-extensions",
                  "typing-inspection")
PYODIDE_SKIP = {"pyodide-lock.json", "package.json", "README.md", "console.html",
                "console-v2.html"}
# The environment the browser's Python runs in, for evaluating requirement markers.
MARKER_ENV = {"python_version": "3.14", "python_full_version": "3.14.2", "sys_platform": "emscripten",
              "platform_system": "Emscripten", "os_name": "posix", "implementation_name": "cpython",
              "platform_machine": "wasm32", "platform_python_implementation": "CPython",
              "extra": ""}


class BuildError(RuntimeError):
    pass


def pins() -> dict[str, str]:
    """`name -> version` for every `name==version` line of constraints.txt."""
    found = {}
    for line in (ROOT / "constraints.txt").read_text().splitlines():
        m = re.match(r"^\s*([A-Za-z0-9_.\-]+)\s*==\s*([^\s#;]+)", line)
        if m:
            found[canonicalize_name(m.group(1))] = m.group(2)
    return found


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def copy_tree(src: Path, dst: Path, skip: set[str] = frozenset()) -> None:  # type: ignore[assignment]
    if not src.is_dir():
        raise BuildError(f"{src.relative_to(ROOT)} is missing: run `npm ci` first")
    dst.mkdir(parents=True, exist_ok=True)
    for f in sorted(src.iterdir()):
        if f.is_file() and f.name not in skip and not f.name.endswith((".map", ".d.ts")):
            shutil.copy2(f, dst / f.name)


def pip_download(abi: str, python: str) -> list[Path]:
    pinned = pins()
    missing = [n for n in PYODIDE_WHEELS if n not in pinned]
    if missing:
        raise BuildError(f"constraints.txt pins no version for {', '.join(missing)}")
    CACHE.mkdir(parents=True, exist_ok=True)
    common = [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps",
              "--only-binary=:all:", "--dest", str(CACHE)]
    native = f"pydantic-core=={pinned['pydantic-core']}"
    subprocess.run([*common, "--platform", f"pyemscripten_{abi}_wasm32",
                    "--python-version", python, native], check=True)
    pure = [f"{n}=={pinned[n]}" for n in PYODIDE_WHEELS if n != "pydantic-core"]
    subprocess.run([*common, *pure], check=True)
    wheels = []
    for name in PYODIDE_WHEELS:
        want = (canonicalize_name(name), pinned[name])
        hits = [w for w in CACHE.glob("*.whl")
                if (canonicalize_name(parse_wheel_filename(w.name)[0]),
                    str(parse_wheel_filename(w.name)[1])) == want]
        if name == "pydantic-core":
            hits = [w for w in hits if f"pyemscripten_{abi}_wasm32" in w.name]
        if len(hits) != 1:
            raise BuildError(f"expected one wheel for {name}=={pinned[name]} in {CACHE}, got {hits}")
        wheels.extend(hits)
    return wheels


def build_own_wheel() -> Path:
    dist = ROOT / "vendor" / "dist"
    shutil.rmtree(dist, ignore_errors=True)
    subprocess.run([sys.executable, "-m", "build", "--wheel", "--outdir", str(dist), str(ROOT)],
                   check=True, stdout=subprocess.DEVNULL)
    (wheel,) = dist.glob("*.whl")
    with zipfile.ZipFile(wheel) as z:
        if not any(n.startswith("calc/presets/models/") for n in z.namelist()):
            raise BuildError(f"{wheel.name} has no calc/presets/: check pyproject's force-include")
    return wheel


def metadata(wheel: Path) -> tuple[list[Requirement], list[str]]:
    """The wheel's unconditional requirements and its top-level import names."""
    with zipfile.ZipFile(wheel) as z:
        names = z.namelist()
        meta = next(n for n in names if n.endswith(".dist-info/METADATA"))
        msg = Parser().parsestr(z.read(meta).decode())
    reqs = [Requirement(r) for r in msg.get_all("Requires-Dist") or []]
    reqs = [r for r in reqs if r.marker is None or r.marker.evaluate(MARKER_ENV)]
    tops = sorted({n.split("/")[0].removesuffix(".py") for n in names
                   if not n.split("/")[0].endswith((".dist-info", ".data"))})
    return reqs, tops


def lock(wheels: list[Path], info: dict[str, str]) -> dict[str, object]:
    """A pyodide-lock.json for exactly `wheels`, after checking they satisfy each other."""
    versions = {canonicalize_name(parse_wheel_filename(w.name)[0]): parse_wheel_filename(w.name)[1]
                for w in wheels}
    packages: dict[str, object] = {}
    for w in wheels:
        name, version = canonicalize_name(parse_wheel_filename(w.name)[0]), parse_wheel_filename(w.name)[1]
        reqs, tops = metadata(w)
        for r in reqs:
            have = versions.get(canonicalize_name(r.name))
            if have is None:
                raise BuildError(f"{w.name} requires {r}, which is not vendored")
            if not r.specifier.contains(have, prereleases=True):
                raise BuildError(f"{w.name} requires {r}, but {r.name} {have} is vendored; "
                                 "fix the pins in constraints.txt")
        packages[name] = {
            "name": name, "version": str(version), "file_name": w.name, "install_dir": "site",
            "sha256": sha256(w), "package_type": "package", "imports": tops,
            "depends": sorted(canonicalize_name(r.name) for r in reqs), "unvendored_tests": False,
        }
    return {"info": info, "packages": packages}


def main() -> None:
    npm_lock = json.loads((NODE / "pyodide" / "pyodide-lock.json").read_text())
    info = npm_lock["info"]
    abi, python = info["abi_version"], ".".join(info["python"].split(".")[:2])
    shutil.rmtree(OUT, ignore_errors=True)
    copy_tree(NODE / "@pyscript" / "core" / "dist", OUT / "pyscript")
    copy_tree(NODE / "pyodide", OUT / "pyodide", PYODIDE_SKIP)
    katex = NODE / "katex" / "dist"  # math rendering for the formula pages (no CDN)
    (OUT / "katex").mkdir(parents=True)
    for name in ("katex.min.js", "katex.min.css"):
        shutil.copy2(katex / name, OUT / "katex" / name)
    copy_tree(katex / "fonts", OUT / "katex" / "fonts")
    wheels = [*pip_download(abi, python), build_own_wheel()]
    for w in wheels:
        shutil.copy2(w, OUT / "pyodide" / w.name)
    subprocess.run(["node", str(ROOT / "tools" / "bytecode.mjs"), str(OUT / "pyodide"),
                    *(w.name for w in wheels)], check=True)
    data = lock([OUT / "pyodide" / w.name for w in wheels], info)
    (OUT / "pyodide" / "pyodide-lock.json").write_text(json.dumps(data, indent=1) + "\n")
    subprocess.run(["node", str(ROOT / "tools" / "snapshot.mjs"), str(OUT / "pyodide"),
                    str(ROOT / "site" / "calculator" / "calc_worker.py")], check=True)
    versions = {
        "pyscript": json.loads((NODE / "@pyscript" / "core" / "package.json").read_text())["version"],
        "pyodide": json.loads((NODE / "pyodide" / "package.json").read_text())["version"],
        "katex": json.loads((NODE / "katex" / "package.json").read_text())["version"],
        "python": info["python"],
        "wheels": {k: v["version"] for k, v in data["packages"].items()},  # type: ignore[index]
    }
    (OUT / "versions.json").write_text(json.dumps(versions, indent=1) + "\n")
    print(f"vendored into {OUT.relative_to(ROOT)}: " + ", ".join(
        f"{k} {v}" for k, v in versions.items() if k != "wheels"))


if __name__ == "__main__":
    try:
        main()
    except (BuildError, subprocess.CalledProcessError) as exc:
        sys.exit(f"vendor_assets: {exc}")
