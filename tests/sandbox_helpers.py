"""Shared helpers of the sandbox tests; no tests here."""

from __future__ import annotations

import stat
from pathlib import Path

__all__ = ["refusing_bwrap"]


def refusing_bwrap(folder: Path) -> Path:
    """A stand-in bubblewrap that fails as one does where the kernel refuses namespaces (point
    ``LITTLE_SANDBOX_BWRAP`` at it)."""
    refusing = folder / "bwrap"
    refusing.write_text(
        "#!/bin/sh\necho 'bwrap: No permissions to create new namespace' >&2\nexit 1\n"
    )
    refusing.chmod(refusing.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return refusing
