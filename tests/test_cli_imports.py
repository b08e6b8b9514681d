"""The CLI and the pure core start without the heavy fleet libraries.

litellm alone takes seconds and hundreds of MB to import; celery, boto3 and redis are only
needed by fleet commands. ``little validate`` and ``import little_dist.compiler`` must load
none of them, directly or through another module.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).parent.parent
HEAVY = ("litellm", "celery", "boto3", "botocore", "redis", "kombu", "flower")
EXAMPLE = ROOT / "examples" / "lwir" / "support-triage.json"
REPORT_HEAVY = (
    "import json, sys\n"
    f"heavy = {set(HEAVY)!r}\n"
    "print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in heavy)))\n"
)


def loaded_heavy_modules(code: str) -> list[str]:
    result = subprocess.run(
        [sys.executable, "-c", code + "\n" + REPORT_HEAVY],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )
    assert result.returncode == 0, result.stderr
    loaded: list[str] = json.loads(result.stdout.strip().splitlines()[-1])
    return loaded


def test_importing_the_cli_loads_nothing_heavy() -> None:
    # build_parser imports every subcommand module that exists.
    assert loaded_heavy_modules("import little_dist.cli\nlittle_dist.cli.build_parser()") == []


def test_running_validate_loads_nothing_heavy() -> None:
    code = (
        "import contextlib, io, little_dist.cli\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        f"    code = little_dist.cli.main(['validate', {str(EXAMPLE)!r}])\n"
        "assert code == 0, code\n"
    )
    assert loaded_heavy_modules(code) == []


def test_the_compiler_is_pure_core() -> None:
    code = (
        "import json\n"
        "from little_dist.compiler import compile_lwir\n"
        f"compile_lwir(json.load(open({str(EXAMPLE)!r})), input={{'accountId': 'a'}})\n"
    )
    assert loaded_heavy_modules(code) == []


def test_validate_import_profile_has_no_heavy_module() -> None:
    result = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "little_dist.cli", "validate", str(EXAMPLE)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )
    assert result.returncode == 0, result.stderr
    imported = [
        line.rsplit("|", 1)[-1].strip()
        for line in result.stderr.splitlines()
        if line.startswith("import time:")
    ]
    assert "little_dist.lwir" in imported  # the profile really covers the command
    assert [name for name in imported if name.split(".")[0] in HEAVY] == []


def test_building_the_cli_parser_does_not_load_the_authoring_layer() -> None:
    # little init / little add register from the workspace package, whose loader imports
    # the authoring layer (pydantic models, schemas): only a command that loads a folder
    # pays for it.
    code = (
        "import sys, little_dist.cli\n"
        "little_dist.cli.build_parser()\n"
        "assert 'little_dist.authoring' not in sys.modules, 'authoring loaded'\n"
    )
    assert loaded_heavy_modules(code) == []
