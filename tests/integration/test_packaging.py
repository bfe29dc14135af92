"""The wheel is enough: build it, install it into a fresh virtualenv (no checkout, no
project venv), and run that venv's ``quartzlite db upgrade`` from another directory.
This proves the alembic migrations ship inside the package (``quartzlite._migrations``).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import uuid
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from sqlalchemy import create_engine, pool, text
from sqlalchemy.engine import make_url

from quartzlite.storage import migrate
from quartzlite.storage.tables import metadata
from tests.migrations.support import table_names

pytestmark = pytest.mark.db

ROOT = Path(__file__).resolve().parents[2]
#: What a wheel is built from; copied so that the build leaves nothing in the checkout.
SOURCES = ("pyproject.toml", "README.md", "LICENSE", "quartzlite", "migrations")


@dataclass(frozen=True)
class Installed:
    wheel: Path
    venv: Path

    @property
    def quartzlite(self) -> Path:
        return self.venv / "bin" / "quartzlite"

    @property
    def python(self) -> Path:
        return self.venv / "bin" / "python"


def run(command: list[str | Path], *, cwd: Path, timeout: float = 240) -> str:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("QUARTZLITE_") and k not in ("PYTHONPATH", "VIRTUAL_ENV")
    }
    done = subprocess.run(
        [str(c) for c in command], cwd=cwd, env=env, capture_output=True, text=True,
        timeout=timeout, check=False,
    )
    assert done.returncode == 0, (
        f"{command} exited {done.returncode}\n--- stdout\n{done.stdout}\n--- stderr\n{done.stderr}"
    )
    return done.stdout


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Installed:
    base = tmp_path_factory.mktemp("packaging")
    source = base / "src"
    source.mkdir()
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    for name in SOURCES:
        path = ROOT / name
        if path.is_dir():
            shutil.copytree(path, source / name, ignore=ignore)
        elif path.exists():
            shutil.copy2(path, source / name)

    dist = base / "dist"
    run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", dist, source], cwd=base)
    (wheel,) = dist.glob("quartzlite-*.whl")

    venv = base / "venv"
    # No pip of its own (ensurepip takes seconds): this venv's pip installs into it.
    run([sys.executable, "-m", "venv", "--without-pip", venv], cwd=base)
    run([sys.executable, "-m", "pip", "--python", venv / "bin" / "python", "install", "-q", wheel],
        cwd=base)
    return Installed(wheel=wheel, venv=venv)


@pytest.fixture
def fresh_url(server_url: str) -> Iterator[str]:
    """A database name nobody uses yet; ``db upgrade`` creates it. Dropped at teardown."""
    server = make_url(server_url).set(drivername="mysql+pymysql", database="")
    name = f"ql_pkg_{uuid.uuid4().hex[:12]}"
    yield server.set(database=name).render_as_string(hide_password=False)
    engine = create_engine(server, poolclass=pool.NullPool)
    with engine.connect() as conn:
        conn.execute(text(f"DROP DATABASE IF EXISTS `{name}`"))
    engine.dispose()


def test_the_wheel_holds_every_migration(installed: Installed) -> None:
    with zipfile.ZipFile(installed.wheel) as wheel:
        names = set(wheel.namelist())

    for path in (ROOT / "migrations").rglob("*"):
        if path.suffix in (".py", ".mako") and "__pycache__" not in path.parts:
            shipped = "quartzlite/_migrations/" + path.relative_to(ROOT / "migrations").as_posix()
            assert shipped in names, f"{shipped} is missing from {installed.wheel.name}"
    assert "quartzlite/py.typed" in names


def test_the_wheel_holds_every_module_of_the_package(installed: Installed) -> None:
    """Every module of every subpackage (a package list in pyproject.toml once left
    quartzlite.node.services out: a node installed from the wheel could not start)."""
    with zipfile.ZipFile(installed.wheel) as wheel:
        names = set(wheel.namelist())
    for path in (ROOT / "quartzlite").rglob("*.py"):
        if "__pycache__" not in path.parts:
            shipped = path.relative_to(ROOT).as_posix()
            assert shipped in names, f"{shipped} is missing from {installed.wheel.name}"


def test_the_installed_package_uses_its_own_migrations(
    installed: Installed, tmp_path: Path
) -> None:
    out = run(
        [installed.python, "-c",
         "from quartzlite.storage import migrate; print(migrate.migrations_dir()); "
         "print(migrate.head_revision())"],
        cwd=tmp_path,
    )

    where, head = out.split()
    assert Path(where).is_relative_to(installed.venv), where
    assert head == migrate.head_revision()


def test_db_upgrade_from_the_installed_wheel(
    installed: Installed, fresh_url: str, tmp_path: Path
) -> None:
    head = migrate.head_revision()

    upgraded = run([installed.quartzlite, "--database-url", fresh_url, "db", "upgrade"],
                   cwd=tmp_path)
    current = run([installed.quartzlite, "--database-url", fresh_url, "db", "current"],
                  cwd=tmp_path)

    assert upgraded.strip() == f"schema at {head}"
    assert current.strip() == f"{head} (at head; head is {head})"
    assert table_names(fresh_url) == set(metadata.tables) | {migrate.VERSION_TABLE}
