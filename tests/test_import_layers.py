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


def _folder(module: str) -> str:
    """A module's folder: the package right under little_dist (a top-level module is its own)."""
    return ".".join(module.split(".")[:2])


def _circles(imports: dict[str, set[str]]) -> list[set[str]]:
    """The import circles of ``imports`` (strongly connected parts of two or more modules)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[set[str]] = []
    for root in imports:
        if root in index:
            continue
        # Tarjan's algorithm, iterative (the graph is deep enough for recursion to matter).
        work = [(root, iter(sorted(imports[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(imports.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                part = set()
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    part.add(member)
                    if member == node:
                        break
                if len(part) > 1:
                    found.append(part)
    return found


def test_every_import_circle_left_stays_inside_one_folder() -> None:
    import grimp

    graph = grimp.build_graph("little_dist", exclude_type_checking_imports=False, cache_dir=None)
    imports = {
        module: set(graph.find_modules_directly_imported_by(module)) for module in graph.modules
    }
    across = [part for part in _circles(imports) if len({_folder(m) for m in part}) > 1]
    assert not across, [sorted({_folder(m) for m in part}) for part in across]


def test_the_circle_finder_finds_a_circle_across_folders() -> None:
    imports = {
        "little_dist.a.x": {"little_dist.b.y"},
        "little_dist.b.y": {"little_dist.a.x"},
        "little_dist.c.z": {"little_dist.c.w"},
        "little_dist.c.w": {"little_dist.c.z"},
        "little_dist.d": set(),
    }
    parts = _circles(imports)
    assert sorted(sorted(p) for p in parts) == [
        ["little_dist.a.x", "little_dist.b.y"],
        ["little_dist.c.w", "little_dist.c.z"],
    ]
