"""The wheel ships the dashboard: its templates and its static files (htmx, app.js,
style.css), so `pip install quartzlite` serves /ui without a checkout.

The wheel is built from a copy of the checkout in a temporary folder: setuptools writes
build/ and *.egg-info next to the sources, and a stale build/lib could hide a file that the
package-data no longer matches. With setuptools >= 77 in the running environment (the test
extra pins it) the build is offline (--no-build-isolation --no-index) and takes a second;
otherwise pip fetches the build requirements from the package index.
"""

from __future__ import annotations

import fnmatch
import os
import shutil
import subprocess
import sys
import zipfile
from importlib import metadata
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
UI = "quartzlite/api/ui"
IGNORE = shutil.ignore_patterns(
    ".git",
    ".venv",
    "build",
    "dist",
    "*.egg-info",
    "__pycache__",
    ".mypy_cache",
    ".pytest_cache",
    ".ruff_cache",
    "node_modules",
)


def _offline_build_possible() -> bool:
    try:
        major = int(metadata.version("setuptools").split(".")[0])
    except (metadata.PackageNotFoundError, ValueError):
        return False
    return major >= 77


def build_wheel(tmp: Path) -> Path:
    src = tmp / "src"
    shutil.copytree(REPO, src, ignore=IGNORE)
    out = tmp / "wheelhouse"
    flags = ["--no-build-isolation", "--no-index"] if _offline_build_possible() else []
    env = {**os.environ, "PIP_DISABLE_PIP_VERSION_CHECK": "1", "PIP_NO_INPUT": "1"}
    proc = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", *flags, "-w", str(out), str(src)],
        capture_output=True,
        text=True,
        timeout=240,
        env=env,
        cwd=tmp,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    wheels = list(out.glob("quartzlite-*.whl"))
    assert len(wheels) == 1, wheels
    return wheels[0]


def test_the_wheel_ships_the_dashboard_templates_and_static_files(tmp_path: Path) -> None:
    wheel = build_wheel(tmp_path)
    with zipfile.ZipFile(wheel) as zf:
        names = set(zf.namelist())
        for name in ("htmx.min.js", "htmx.LICENSE", "app.js", "style.css"):
            assert f"{UI}/static/{name}" in names, name
        # the files themselves, not empty placeholders or LFS pointers
        for name in ("htmx.min.js", "app.js", "style.css"):
            shipped = zf.read(f"{UI}/static/{name}")
            assert shipped == (REPO / UI / "static" / name).read_bytes(), name
        templates = fnmatch.filter(names, f"{UI}/templates/ui/*.html")
        assert templates, sorted(n for n in names if n.startswith(UI))
        # every template of the checkout is in the wheel (no subfolder escapes the glob)
        on_disk = {
            f"{UI}/templates/{p.relative_to(REPO / UI / 'templates').as_posix()}"
            for p in (REPO / UI / "templates").rglob("*")
            if p.is_file()
        }
        assert on_disk <= names, on_disk - names
        assert f"{UI}/__init__.py" in names
        assert f"{UI}/charts.py" in names
