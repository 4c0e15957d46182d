"""Reading engines started by hand back into servefleet config (``servefleet import``).

Pure: the adapter (:mod:`servefleet.adapters.importer`) brings ``docker inspect`` JSON from
the node; here it becomes a :class:`RunningEngine` (:mod:`.inspect`, :mod:`.entrypoint`),
its argv becomes flags and profile fields (:mod:`.argv`, the inverse of the engines'
``flag_pairs``), the closest shipped profile plus an overlay becomes the profile text, checked
by rendering it again (:mod:`.profile`), and the stack file gets the deployment with
``adopt:`` (:mod:`.stack_entry`).

Secret values never enter these objects: an environment variable whose name looks secret
keeps only its name, and a flag whose name does is refused.
"""

from __future__ import annotations

from servefleet.core.adopt.inspect import running_engine, running_engines
from servefleet.core.adopt.profile import ImportedProfile, imported_profile
from servefleet.core.adopt.running import Mount, RunningEngine
from servefleet.core.adopt.stack_entry import add_deployment

__all__ = ["ImportedProfile", "Mount", "RunningEngine", "add_deployment", "imported_profile",
           "running_engine", "running_engines"]
