"""little-dist: the distributed Python engine for little-workflow workflows."""

from __future__ import annotations

__version__ = "0.1.0"

__all__ = ["__version__"]
