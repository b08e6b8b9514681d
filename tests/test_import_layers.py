"""The layers contract (pyproject.toml, ``[tool.importlinter]``; ``.ci/lint`` runs it) holds,
and fails naming the import when a lower layer imports a higher one: at the top of a module,
inside a function (a lazy import) or under ``TYPE_CHECKING``. The failing cases run
``lint-imports`` on a copy of the package with one upward import added."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
LINT_IMPORTS = Path(sys.executable).parent / "lint-imports"


def _lint_imports(where: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(LINT_IMPORTS), "--no-cache", "--no-logo"],
        cwd=where,
        env={"PYTHONPATH": str(where), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.fixture
def copy(tmp_path: Path) -> Path:
    shutil.copytree(
        ROOT / "little_dist", tmp_path / "little_dist", ignore=shutil.ignore_patterns("__pycache__")
    )
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    return tmp_path


def test_the_package_keeps_its_layers() -> None:
    result = _lint_imports(ROOT)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Contracts: 1 kept, 0 broken." in result.stdout


UPWARD = {
    "top": "from little_dist.fleet.client import Client\n",
    "lazy": "\n\ndef _upward() -> object:\n    from little_dist.fleet.client import Client\n\n"
    "    return Client\n",
    "type_checking": "from typing import TYPE_CHECKING\n\nif TYPE_CHECKING:\n"
    "    from little_dist.fleet.client import Client\n",
}


@pytest.mark.parametrize("kind", sorted(UPWARD))
def test_an_upward_import_breaks_the_contract_and_is_named(copy: Path, kind: str) -> None:
    # The world (a low layer) importing the fleet's client (a high one).
    module = copy / "little_dist" / "world" / "artifacts.py"
    text = module.read_text()
    head, tail = text.split("from __future__ import annotations\n", 1)
    module.write_text(head + "from __future__ import annotations\n" + UPWARD[kind] + tail)
    result = _lint_imports(copy)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "Contracts: 0 kept, 1 broken." in result.stdout
    assert "little_dist.world.artifacts -> little_dist.fleet.client" in result.stdout


def test_a_package_without_a_layer_breaks_the_contract(copy: Path) -> None:
    (copy / "little_dist" / "ledgers").mkdir()
    (copy / "little_dist" / "ledgers" / "__init__.py").write_text('"""Ledgers."""\n')
    result = _lint_imports(copy)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "little_dist.ledgers" in result.stdout


def test_the_readme_layout_table_names_every_layer_in_the_contracts_order() -> None:
    import re
    import tomllib

    contract = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    layers = [
        {name.strip() for name in line.split("|")} for line in contract["contracts"][0]["layers"]
    ]
    readme = (ROOT / "README.md").read_text()
    table = readme.split("## Layout\n", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in table.splitlines() if re.match(r"^\| \d+ \|", line)]
    named = [
        {
            re.sub(r"^little_dist/", "", path).removesuffix("/").removesuffix(".py")
            for path in re.findall(r"`([^`]+)`", row.split("|")[2])
        }
        for row in rows
    ]
    assert named == layers
