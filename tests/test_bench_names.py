"""A benchmark script runs with ``bench/`` first on ``sys.path``: a file there named like a
standard library module (``http.py``) hides that module from every other bench script
(``bench/fleet.py`` failed at ``import httpx``, which imports ``http.client``)."""

from __future__ import annotations

import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parent.parent / "bench"


def test_no_bench_script_is_named_like_a_standard_library_module() -> None:
    names = {path.stem for path in BENCH.glob("*.py")} | {
        path.name for path in BENCH.iterdir() if path.is_dir() and (path / "__init__.py").exists()
    }
    assert names  # the folder is where this test looks
    assert sorted(names & set(sys.stdlib_module_names)) == []
