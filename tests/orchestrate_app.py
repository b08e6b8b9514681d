"""An app module for ``little orchestrate`` tests: the doubling workflow of
:mod:`tests.test_subruns`, listed in ``WORKFLOWS``."""

from __future__ import annotations

from tests.test_subruns import double_workflow

double = double_workflow()
WORKFLOWS = [double]
