#!/usr/bin/env python3
"""TEST HARNESS: builds the kvikio/cupy stand-ins (tests/harness/standin_wheels/{kvikio,cupy})
as wheels with the real project names (kvikio-cu12, kvikio-cu13, cupy-cuda12x, cupy-cuda13x)
at the versions pinned in roles/verify_runtime/defaults/main.yml, and lays them out as a PEP 503
simple index:  OUT/simple/index.html, OUT/simple/<project>/index.html + <wheel>.

Every wheel says TEST STAND-IN in its summary and description: it is NOT kvikio or CuPy, only
the pure-Python imitation the simulated nodes use (it reads the node's simulated hardware from
/usr/local/lib/gdsfleet-sim). Stdlib only; reproducible (fixed timestamps, sorted entries).

    build_wheels.py OUT_DIR            # build the index
    build_wheels.py --versions         # print the pinned versions (kvikio cupy)
"""

from __future__ import annotations

import base64
import hashlib
import html
import re
import sys
import zipfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[2]
DEFAULTS = ROOT / "roles" / "verify_runtime" / "defaults" / "main.yml"
# project name -> (import package, which pinned version)
PROJECTS = {
    "kvikio-cu12": ("kvikio", "kvikio"),
    "kvikio-cu13": ("kvikio", "kvikio"),
    "cupy-cuda12x": ("cupy", "cupy"),
    "cupy-cuda13x": ("cupy", "cupy"),
}
EPOCH = (2020, 1, 1, 0, 0, 0)
LABEL = ("TEST STAND-IN (gdsfleet test harness): NOT {real}. A pure-Python imitation of the part "
         "of the {real} API that gdsfleet's verification uses, backed by the simulated GPU node.")


def pinned_versions(defaults: Path = DEFAULTS) -> dict[str, str]:
    """verify_runtime_{kvikio,cupy}_version from the role's defaults (one source of truth)."""
    text = defaults.read_text()
    out = {}
    for key in ("kvikio", "cupy"):
        m = re.search(rf'^verify_runtime_{key}_version:\s*"?([0-9.]+)"?\s*$', text, re.M)
        if not m:
            raise SystemExit(f"{defaults}: no verify_runtime_{key}_version")
        out[key] = m.group(1)
    return out


VARS = ROOT / "roles" / "verify_runtime" / "vars" / "main.yml"
CUFILE_LABEL = ("TEST STAND-IN (gdsfleet test harness): NOT NVIDIA's {real} wheel. It carries no "
                "library (the simulated node's libcufile is the stand-in CUDA package's); it only "
                "lets the role's pinned cuFile requirement resolve as it does on a GPU node.")


def cufile_wheels(vars_file: Path = VARS) -> list[tuple[str, str]]:
    """(project, version) of one stand-in cuFile wheel per row of the role's table
    (__verify_runtime_cufile_by_cuda: CUDA minor -> libcufile release; the project is
    __verify_runtime_cufile_wheel's name for that CUDA major), so the role's pin resolves for
    every CUDA release it knows, as it does against PyPI."""
    text = vars_file.read_text()  # read without PyYAML: setup.sh may run this before .venv

    def block(key: str) -> dict[str, str]:
        m = re.search(rf"^{key}:\n((?:  .*\n)+)", text, re.M)
        if not m:
            raise SystemExit(f"{vars_file}: no {key}")
        return {k.strip('"'): v.strip().strip('"') for k, v in
                (line.strip().split(":", 1) for line in m.group(1).splitlines())}

    names = block("__verify_runtime_cufile_wheel")
    rows = block("__verify_runtime_cufile_by_cuda")
    # the stand-in CUDA packages' libcufile versions (what the simulated host has), so that the
    # newest wheel of a release is the host's, as on PyPI for a current CUDA update
    debs = (HERE.parent / "standin_repo" / "build_debs.py").read_text()
    host = {f"{m[0]}.{m[1]}": m[2] for m in re.findall(
        r'\("(\d+)-(\d+)", "[^"]*", "([0-9.]+)-\d+"', debs)}
    return sorted({(names[cuda.split(".")[0]], host.get(cuda, f"{release}.0"))
                   for cuda, release in rows.items()})


def build_cufile_wheel(project: str, version: str, out_dir: Path) -> Path:
    dist = project.replace("-", "_")
    info = f"{dist}-{version}.dist-info"
    summary = CUFILE_LABEL.format(real=project)
    files: dict[str, bytes] = {
        "nvidia/cufile/STANDIN.txt": (summary + "\n").encode(),
        f"{info}/METADATA": (
            "Metadata-Version: 2.1\n"
            f"Name: {project}\nVersion: {version}\nSummary: {summary}\n"
            "License: Apache-2.0\nRequires-Python: >=3.8\n\n"
            f"{summary}\nBuilt by tests/harness/standin_wheels/build_wheels.py.\n").encode(),
        f"{info}/WHEEL": (b"Wheel-Version: 1.0\nGenerator: gdsfleet-standin-build-wheels\n"
                          b"Root-Is-Purelib: true\nTag: py3-none-any\n"),
        f"{info}/top_level.txt": b"nvidia\n",
    }
    return _write_wheel(files, info, out_dir / f"{dist}-{version}-py3-none-any.whl")


def module_version(pkg: str, version: str) -> str:
    """What the module's __version__ says: RAPIDS pads (26.10.00), CuPy does not."""
    if pkg == "kvikio":
        parts = version.split(".") + ["0", "0"]
        return f"{int(parts[0])}.{int(parts[1]):02d}.{int(parts[2]):02d}"
    return version


def _record_hash(data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=")
    return "sha256=" + digest.decode()


def build_wheel(project: str, version: str, out_dir: Path) -> Path:
    pkg, _ = PROJECTS[project]
    dist = project.replace("-", "_")
    info = f"{dist}-{version}.dist-info"
    files: dict[str, bytes] = {}
    src = HERE / pkg
    for path in sorted(src.rglob("*.py")):
        if "__pycache__" in path.parts:
            continue
        data = path.read_bytes()
        if path == src / "__init__.py":
            line = f'__version__ = "{module_version(pkg, version)}"'.encode()
            data = re.sub(rb'^__version__ = "[^"]*"', line, data, count=1, flags=re.M)
        files[f"{pkg}/{path.relative_to(src).as_posix()}"] = data
    real = "kvikio" if pkg == "kvikio" else "CuPy"
    summary = LABEL.format(real=real)
    files[f"{info}/METADATA"] = (
        "Metadata-Version: 2.1\n"
        f"Name: {project}\nVersion: {version}\nSummary: {summary}\n"
        "License: Apache-2.0\nRequires-Python: >=3.8\n"
        "Description-Content-Type: text/plain\n\n"
        f"{summary}\nBuilt by tests/harness/standin_wheels/build_wheels.py for the simulated\n"
        "lab; installed on simulated nodes by the role gdsfleet.gds.verify_runtime exactly as\n"
        f"the real {project} wheel would be on a GPU node.\n").encode()
    files[f"{info}/WHEEL"] = (b"Wheel-Version: 1.0\nGenerator: gdsfleet-standin-build-wheels\n"
                              b"Root-Is-Purelib: true\nTag: py3-none-any\n")
    files[f"{info}/top_level.txt"] = f"{pkg}\n".encode()
    return _write_wheel(files, info, out_dir / f"{dist}-{version}-py3-none-any.whl")


def _write_wheel(files: dict[str, bytes], info: str, wheel: Path) -> Path:
    record = "".join(f"{name},{_record_hash(data)},{len(data)}\n" for name, data in files.items())
    files[f"{info}/RECORD"] = (record + f"{info}/RECORD,,\n").encode()
    wheel.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(wheel, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, data in files.items():
            zi = zipfile.ZipInfo(name, EPOCH)
            zi.external_attr = 0o644 << 16
            zi.compress_type = zipfile.ZIP_DEFLATED
            zf.writestr(zi, data)
    return wheel


def build_index(out: Path) -> list[Path]:
    versions = pinned_versions()
    simple = out / "simple"
    wheels = []
    links = []
    built: dict[str, list[Path]] = {}
    for project in sorted(PROJECTS):
        pkg, which = PROJECTS[project]
        built.setdefault(project, []).append(
            build_wheel(project, versions[which], simple / project))
    for project, version in cufile_wheels():
        built.setdefault(project, []).append(
            build_cufile_wheel(project, version, simple / project))
    for project in sorted(built):
        pdir = simple / project
        anchors = []
        for wheel in built[project]:
            wheels.append(wheel)
            sha = hashlib.sha256(wheel.read_bytes()).hexdigest()
            name = html.escape(wheel.name)
            anchors.append(f"<a href=\"{name}#sha256={sha}\" "
                           f"data-requires-python=\"&gt;=3.8\">{name}</a><br>\n")
        (pdir / "index.html").write_text(
            "<!DOCTYPE html>\n<html><head><meta name=\"pypi:repository-version\" content=\"1.0\">"
            f"<title>Links for {project} (gdsfleet TEST STAND-IN)</title></head><body>\n"
            f"<h1>Links for {project}</h1>\n" + "".join(anchors) + "</body></html>\n")
        links.append(f"<a href=\"{project}/\">{project}</a><br>")
    (simple / "index.html").write_text(
        "<!DOCTYPE html>\n<html><head><meta name=\"pypi:repository-version\" content=\"1.0\">"
        "<title>gdsfleet stand-in package index (TEST ONLY)</title></head><body>\n"
        + "\n".join(links) + "\n</body></html>\n")
    return wheels


def main(argv: list[str]) -> int:
    if argv[1:] == ["--versions"]:
        v = pinned_versions()
        print(v["kvikio"], v["cupy"])
        return 0
    if len(argv) != 2:
        print(__doc__, file=sys.stderr)
        return 64
    for wheel in build_index(Path(argv[1])):
        print(f"built {wheel}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
