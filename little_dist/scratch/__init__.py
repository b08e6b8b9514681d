"""Run scratch: the folders agents work in, with upstream's layout, backed by the World.

``/mnt/scratch/own/`` (the step's own, writable), ``/mnt/scratch/from-planner/`` and
``/mnt/scratch/from-orchestrator/`` (read-only), ``/mnt/scratch/peer-steps/<step>/`` (completed
peers, read-only). :mod:`~little_dist.scratch.files` reads who has which files from the run's
log (pure); :mod:`~little_dist.scratch.attempt` makes an attempt's folders from the World and
publishes its changes with its commit.
"""

from little_dist.scratch.attempt import AttemptScratch, Changes, ScratchLimitError
from little_dist.scratch.files import OWN, ScratchFile, scratch_files

__all__ = ["OWN", "AttemptScratch", "Changes", "ScratchFile", "ScratchLimitError", "scratch_files"]
