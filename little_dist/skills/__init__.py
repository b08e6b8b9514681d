"""Skills from ``SKILL.md`` folders (upstream's format), for the models of a workflow's roles.

::

    from little_dist import define_workflow, skill

    wf = define_workflow(
        id="support.refunds",
        model="openai/gpt-4o-mini",
        tools=[lookup_order],
        skills=[skill("skills/refund-policy")],   # a folder with SKILL.md, relative to this file
        org_skills="/srv/org-skills",             # optional: every skill in that folder
        discover_skills=[".agents/skills"],       # optional: walk up to the git root
        bash={},                                  # lets the model read the skill's files
    )

The modules:

* :mod:`.frontmatter` — the ``---`` front matter of ``SKILL.md`` (``name``, ``description``,
  optional ``model`` and ``allowed-tools``), upstream's parser and ``frontmatterHash``;
* :mod:`.folders` — reading a folder or ``.md`` file into a
  :class:`~little_dist.harness.types.SkillDescriptor` (its files and their content hash, read
  once when the workflow is defined), org and discovered skills, upstream's precedence;
* :mod:`.mounts` — the files of the chosen skills, read-only at ``/mnt/skills/<name>/`` in
  the bash tool's sandbox;
* :mod:`.allowed` — ``allowed-tools``, enforced.

What the model is told: the skills section of the role's system prompt
(:mod:`little_dist.harness.prompts`, sorted by name) lists each skill's name and
description and the command that reads it (``cat /mnt/skills/<name>/SKILL.md``) — upstream's
progressive disclosure; without the bash tool a folder skill's ``SKILL.md`` is given in the
prompt instead, as an inline skill's text is. The session's manifest (``skillsHash``) holds
each skill's name, description, content hash and ``allowed-tools``: a resumed step whose
skills changed fails with ``capability_drift`` (:mod:`little_dist.harness.drift`).

On the fleet: a worker gets a workflow's skills the way it gets its tools, by importing the
app module that defines it; the bytes it runs with are the ones it read then, and a worker
whose copy differs from the one a step started with fails that step with
``capability_drift`` rather than running other instructions.
"""

from __future__ import annotations

from little_dist.skills.allowed import ToolNotAllowedError, restrict_tools, tool_allowed
from little_dist.skills.folders import choose_skills, discover_skills, load_skill, org_skills
from little_dist.skills.frontmatter import SkillError, SkillNameError, parse_front_matter
from little_dist.skills.mounts import SKILLS_ROOT, skill_mounts, skill_path

__all__ = [
    "SKILLS_ROOT",
    "SkillError",
    "SkillNameError",
    "ToolNotAllowedError",
    "choose_skills",
    "discover_skills",
    "load_skill",
    "org_skills",
    "parse_front_matter",
    "restrict_tools",
    "skill_mounts",
    "skill_path",
    "tool_allowed",
]
