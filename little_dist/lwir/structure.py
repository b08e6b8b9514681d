"""Graph checks over one step list: execution-flow edges, reachability, cycles, terminals.

The execution-flow graph has an edge ``A -> B`` when B ``needs`` A, and ``D -> T`` when
decision D routes to T. A cycle (a non-trivial strongly connected component) is legal only
when every step on it may run more than once (``maxVisits >= 2``) and every loop inside it
passes through a decision step; the second rule is checked by removing the decision steps
and looking for components again.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from little_dist.lwir._js import MISSING, is_record, js_to_number
from little_dist.lwir.findings import Finding, error
from little_dist.lwir.flow_checks import decision_targets

__all__ = [
    "Graph",
    "can_reach",
    "execution_flow_edges",
    "is_multi_visit",
    "strongly_connected_components",
    "validate_cycles",
    "validate_decision_deadlocks",
    "validate_terminal_steps",
    "visit_limit",
]

#: Successors by step id, in insertion order (dicts used as ordered sets).
Graph = dict[str, dict[str, None]]


def visit_limit(step: Mapping[str, Any]) -> float:
    """``step.maxVisits ?? 1`` as JavaScript compares it (``null`` also means the default)."""
    value = step.get("maxVisits", MISSING)
    if value is MISSING or value is None:
        return 1.0
    return js_to_number(value)


def execution_flow_edges(
    steps_by_id: Mapping[str, dict[str, Any]], needs_by_id: Mapping[str, Sequence[str]]
) -> Graph:
    """Needs-edges plus decision edges between the steps of one list (external ids skipped)."""
    outgoing: Graph = {step_id: {} for step_id in steps_by_id}
    for step_id, step in steps_by_id.items():
        for dependency in needs_by_id.get(step_id, ()):
            if dependency in outgoing:
                outgoing[dependency][step_id] = None
        for target in decision_targets(step):
            if target in outgoing:
                outgoing[step_id][target] = None
    return outgoing


def can_reach(source: str, target: str, outgoing: Graph) -> bool:
    """Whether ``target`` is reachable from ``source`` by at least one edge."""
    seen = {source}
    queue = deque([source])
    while queue:
        for neighbour in outgoing.get(queue.popleft(), ()):
            if neighbour == target:
                return True
            if neighbour not in seen:
                seen.add(neighbour)
                queue.append(neighbour)
    return False


def strongly_connected_components(nodes: Iterable[str], outgoing: Graph) -> list[list[str]]:
    """Tarjan's algorithm, iteratively; components in upstream's order (stack pop order)."""
    index: dict[str, int] = {}
    lowlink: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    components: list[list[str]] = []

    for root in nodes:
        if root in index:
            continue
        index[root] = lowlink[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        frames = [(root, iter(outgoing.get(root, ())))]
        while frames:
            node, neighbours = frames[-1]
            advanced = False
            for neighbour in neighbours:
                if neighbour not in index:
                    index[neighbour] = lowlink[neighbour] = len(index)
                    stack.append(neighbour)
                    on_stack.add(neighbour)
                    frames.append((neighbour, iter(outgoing.get(neighbour, ()))))
                    advanced = True
                    break
                if neighbour in on_stack and index[neighbour] < lowlink[node]:
                    lowlink[node] = index[neighbour]
            if advanced:
                continue
            frames.pop()
            if frames:
                parent = frames[-1][0]
                lowlink[parent] = min(lowlink[parent], lowlink[node])
            if lowlink[node] == index[node]:
                component: list[str] = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                components.append(component)
    return components


def _is_cycle(component: list[str], outgoing: Graph) -> bool:
    return len(component) > 1 or component[0] in outgoing.get(component[0], {})


def validate_cycles(
    steps_by_id: Mapping[str, dict[str, Any]], outgoing: Graph, path: str, findings: list[Finding]
) -> None:
    """``lwir.invalid_cycle`` for loops that are unbounded or have no decision step on them."""
    for component in strongly_connected_components(steps_by_id, outgoing):
        if not _is_cycle(component, outgoing):
            continue
        if not all(visit_limit(steps_by_id[member]) >= 2 for member in component):
            findings.append(
                error(
                    "lwir.invalid_cycle",
                    path,
                    f"Cycle [{' -> '.join(component)}] is invalid: every cycle step must have "
                    "maxVisits >= 2.",
                )
            )
            continue
        members = set(component)
        residual: Graph = {}
        for member in component:
            if steps_by_id[member].get("uses") == "decision":
                continue
            residual[member] = {
                target: None
                for target in outgoing[member]
                if target in members and steps_by_id[target].get("uses") != "decision"
            }
        for loop in strongly_connected_components(residual, residual):
            if _is_cycle(loop, residual):
                findings.append(
                    error(
                        "lwir.invalid_cycle",
                        path,
                        f"Cycle [{' -> '.join(loop)}] is invalid: cycle must contain a decision "
                        "step.",
                    )
                )


def validate_decision_deadlocks(
    steps_by_id: Mapping[str, dict[str, Any]],
    needs_by_id: Mapping[str, Sequence[str]],
    indexes_by_id: Mapping[str, int],
    path: str,
    findings: list[Finding],
) -> None:
    """A step that ``needs`` a decision target with needs of its own may never be scheduled.

    Targets without needs run on the first pass whatever the routing, so needing them is safe;
    decision steps and decision targets are exempt as dependents (routing already controls them).
    """
    all_targets: set[str] = set()
    risky_targets: set[str] = set()
    for step in steps_by_id.values():
        for target in decision_targets(step):
            all_targets.add(target)
            target_step = steps_by_id.get(target)
            if target_step is not None:
                target_needs = target_step.get("needs")
                if type(target_needs) is list and target_needs:
                    risky_targets.add(target)
    if not risky_targets:
        return
    for step_id, needs in needs_by_id.items():
        if steps_by_id[step_id].get("uses") == "decision" or step_id in all_targets:
            continue
        for dependency in needs:
            if dependency in risky_targets:
                findings.append(
                    error(
                        "lwir.decision_target_referenced_by_needs",
                        f"{path}[{indexes_by_id[step_id]}].needs",
                        f"Step '{step_id}' declares '{dependency}' in needs, but '{dependency}' "
                        f"is a decision target — it may never be routed to, causing "
                        f"'{step_id}' to deadlock.",
                    )
                )


def validate_terminal_steps(steps: Sequence[Any], path: str, findings: list[Finding]) -> None:
    """Exactly one top-level step may produce the workflow output (the runtime's rule)."""
    needed: set[str] = set()
    targets: set[str] = set()
    for step in steps:
        if not is_record(step):
            continue
        needs = step.get("needs")
        if type(needs) is list:
            needed.update(need for need in needs if type(need) is str)
        targets.update(decision_targets(step))
    terminals = [
        step["id"]
        for step in steps
        if is_record(step)
        and type(step.get("id")) is str
        and step.get("uses") != "decision"
        and step["id"] not in needed
        and step["id"] not in targets
    ]
    if len(terminals) > 1:
        findings.append(
            error(
                "terminal.ambiguous",
                path,
                "A workflow must have exactly one terminal step that produces its output, but "
                f"found {len(terminals)}: {', '.join(terminals)}. Chain steps with `needs` so a "
                "single final step produces the declared output.",
            )
        )


def is_multi_visit(step: Mapping[str, Any]) -> bool:
    """``(step.maxVisits ?? 1) > 1``."""
    return visit_limit(step) > 1
