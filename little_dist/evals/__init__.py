"""Eval sets as upstream defines them (``eval-set.ts``, ``eval-set-store.ts``): a bundle
(the eval card and a Merkle index of item hashes, :mod:`.bundle`, :mod:`.card`), item bodies
behind their own hashes (:mod:`.items`), the sealed gate split (:mod:`.seal`), their store
in a local world (:mod:`.store`), and running a set against a workflow (:mod:`.runner`,
ours: upstream has no runner).
"""

from __future__ import annotations

from little_dist.evals.bundle import (
    EVAL_ITEM_ROLES,
    EVAL_SET_API_VERSION,
    EVAL_SET_CANONICALIZER,
    LWIR_INPUT_CONE_ALGORITHM,
    WORKFLOW_TARGET,
    EvalSetValidationError,
    EvalSetVersion,
    register_eval_set,
    sort_index,
    validate_eval_set,
)
from little_dist.evals.checks import Findings
from little_dist.evals.items import (
    EVAL_ITEM_API_VERSION,
    eval_item_body_sha,
    eval_item_sha,
    index_entry,
    registered_body,
    validate_eval_item_body,
    verify_eval_set_bodies,
)
from little_dist.evals.runner import Case, CaseRun, cases_of, compare, cone_for, run_cases
from little_dist.evals.seal import is_sealed, seal_key_id
from little_dist.evals.store import EvalStore, eval_store_for

__all__ = [
    "EVAL_ITEM_API_VERSION",
    "EVAL_ITEM_ROLES",
    "EVAL_SET_API_VERSION",
    "EVAL_SET_CANONICALIZER",
    "LWIR_INPUT_CONE_ALGORITHM",
    "WORKFLOW_TARGET",
    "Case",
    "CaseRun",
    "EvalSetValidationError",
    "EvalSetVersion",
    "EvalStore",
    "Findings",
    "cases_of",
    "compare",
    "cone_for",
    "eval_item_body_sha",
    "eval_item_sha",
    "eval_store_for",
    "index_entry",
    "is_sealed",
    "register_eval_set",
    "registered_body",
    "run_cases",
    "seal_key_id",
    "sort_index",
    "validate_eval_item_body",
    "validate_eval_set",
    "verify_eval_set_bodies",
]
