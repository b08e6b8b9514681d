"""Model slots and skills: ``model(...)``, ``skill(...)`` and upstream's slot-id derivation
(``model-slots.ts``)."""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from little_dist.canonical import sha256_digest
from little_dist.errors import InvalidInputError
from little_dist.harness.types import ResolvedModel, SkillDescriptor

__all__ = ["ModelSlot", "as_slot", "derive_slot_id", "model", "resolve_slots", "skill"]

_SLOT_SANITIZE = (
    (re.compile(r"[/.:_\s]+"), "-"),
    (re.compile(r"[^a-z0-9-]+"), ""),
    (re.compile(r"-+"), "-"),
)
# Upstream's suffixes for slot ids that would otherwise collide (``model-slots.ts``).
_ANIMALS = tuple(
    " ".join(
        (
            "tiger panda wolf bear fox owl hawk deer lynx moose otter raven shark whale lion",
            "eagle swan crane seal puma yak ibex elk boar hare stoat marten ocelot leopard",
            "cheetah jaguar gazelle antelope bison buffalo camel llama alpaca ox kestrel merlin",
            "falcon kite harrier osprey vulture condor salmon trout carp tuna marlin barracuda",
            "manta ray dolphin narwhal beluga orca porpoise octopus squid nautilus",
        )
    ).split(" ")
)


@dataclass(frozen=True)
class ModelSlot:
    """A model the workflow may use: a litellm model string behind a slot id.

    ``id`` is what LWIR steps name in ``with.model`` (derived from the model name when not
    given, as upstream derives it). ``pricing`` is the registry key the calls are priced
    under (``"openai/gpt-4o-mini"``); it defaults to the litellm model, so a scripted model
    (``scripted/demo``) reports dollars only when given one. ``settings`` are extra
    ``litellm.completion`` keyword arguments (``temperature``, ...).
    """

    litellm_model: str
    id: str | None = None
    description: str = ""
    pricing: str | None = None
    settings: Mapping[str, Any] = field(default_factory=dict)

    @property
    def provider_id(self) -> str:
        provider, _, name = self.litellm_model.partition("/")
        return provider if name else "openai"

    @property
    def model_id(self) -> str:
        provider, _, name = self.litellm_model.partition("/")
        return name or provider

    def resolved(self, slot_id: str) -> ResolvedModel:
        """The runtime binding of this slot under ``slot_id``."""
        return ResolvedModel(
            slot_id=slot_id,
            litellm_model=self.litellm_model,
            pricing_key=self.pricing or "",
            settings=dict(self.settings),
        )


def model(
    litellm_model: str,
    *,
    id: str | None = None,
    description: str = "",
    pricing: str | None = None,
    **settings: Any,
) -> ModelSlot:
    """A model slot: ``model("openai/gpt-4o-mini", id="fast", temperature=0)``."""
    if not isinstance(litellm_model, str) or not litellm_model.strip():
        raise InvalidInputError(f"model() needs a litellm model string, got {litellm_model!r}")
    if id is not None and (not isinstance(id, str) or not id):
        raise InvalidInputError(f"model slot id must be a non-empty string, got {id!r}")
    return ModelSlot(litellm_model, id, description, pricing, dict(settings))


def skill(
    name: str | os.PathLike[str],
    description: str | None = None,
    body: str = "",
    *,
    base_dir: str | os.PathLike[str] | None = None,
) -> SkillDescriptor:
    """A skill for the workflow's models, in one of two forms.

    ``skill("skills/refund-policy")`` (upstream's ``skill(path)``): a folder holding
    ``SKILL.md`` (front matter ``name``, ``description``, optional ``allowed-tools``) and any
    files beside it, or a single ``.md`` file; its files are read now (see
    :mod:`little_dist.skills`). A relative path is taken from ``base_dir``, by default the
    folder of the file that calls ``skill()`` (so an app module finds its skills wherever it
    is imported from). ``skill(name, description, body)``: a text skill, whose name and
    description (and body) go into the model's prompt.
    """
    if description is None and not body:
        return _folder_skill(name, base_dir, sys._getframe(1).f_globals.get("__file__"))
    if not isinstance(name, str):
        raise InvalidInputError(f"skill name must be a non-empty string, got {name!r}")
    for label, value in (("name", name), ("description", description)):
        if not isinstance(value, str) or not value.strip():
            raise InvalidInputError(f"skill {label} must be a non-empty string, got {value!r}")
    if not isinstance(body, str):
        raise InvalidInputError(f"skill {name!r}: body must be a string")
    assert description is not None
    return SkillDescriptor(name=name, description=description, body=body)


def caller_dir(caller_file: object) -> Path:
    """The folder of the calling module's file (the working folder when there is none)."""
    if isinstance(caller_file, str) and caller_file:
        return Path(caller_file).resolve().parent
    return Path.cwd()


def _folder_skill(source: object, base_dir: object, caller_file: object) -> SkillDescriptor:
    from little_dist.skills import load_skill

    if not isinstance(source, str | os.PathLike) or not str(source).strip():
        raise InvalidInputError(f"skill() needs a skill folder or .md file, got {source!r}")
    path = Path(source)
    if not path.is_absolute():
        base = (
            Path(base_dir) if isinstance(base_dir, str | os.PathLike) else caller_dir(caller_file)
        )
        path = base / path
    return load_skill(path, "workflow")


def derive_slot_id(slot: ModelSlot, index: int, taken: set[str]) -> str:
    base = slot.model_id.lower()
    for pattern, replacement in _SLOT_SANITIZE:
        base = pattern.sub(replacement, base)
    base = base.strip("-") or f"model-{index}"
    if base not in taken:
        return base
    digest = sha256_digest(f"{slot.provider_id}:{slot.model_id}:{slot.description}")
    start = int(digest[7:15], 16) % len(_ANIMALS)
    for offset in range(len(_ANIMALS)):
        candidate = f"{base}-{_ANIMALS[(start + offset) % len(_ANIMALS)]}"
        if candidate not in taken:
            return candidate
    raise InvalidInputError(f"Cannot derive a unique slot id for {base!r}: too many duplicates.")


def resolve_slots(slots: Sequence[ModelSlot]) -> dict[str, ModelSlot]:
    explicit: set[str] = set()
    for slot in slots:
        if slot.id is not None:
            if slot.id in explicit:
                raise InvalidInputError(f"Slot id {slot.id!r} is already in use.")
            explicit.add(slot.id)
    resolved: dict[str, ModelSlot] = {}
    taken = set(explicit)
    for index, slot in enumerate(slots):
        slot_id = slot.id if slot.id is not None else derive_slot_id(slot, index, taken)
        taken.add(slot_id)
        resolved[slot_id] = slot
    return resolved


def as_slot(value: str | ModelSlot, what: str) -> ModelSlot:
    if isinstance(value, ModelSlot):
        return value
    if isinstance(value, str):
        return model(value)
    raise InvalidInputError(
        f"{what} must be a litellm model string or model(...), got {type(value).__name__}"
    )
