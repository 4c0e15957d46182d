"""``servefleet models pin``: a checkpoint's own files and facts, pinned into git.

Pure: what the hub published is passed in (file names and sizes, the bytes of the small
files), and what comes out is data (the files to write, the weights' size, the planner's
verdict, the profile text with its pin). The fetching is the adapter's
(:mod:`servefleet.adapters.hub_pin`)."""

from servefleet.core.modelpin.checkpoint import PinnedCheckpoint, pinned_checkpoint
from servefleet.core.modelpin.profile_edit import ProfilePin, write_pin
from servefleet.core.modelpin.spec import (
    PINNED_FILES,
    RepoSpec,
    WeightFiles,
    parse_spec,
    pin_command,
    pin_folder,
    weight_files,
)
from servefleet.core.modelpin.verdict import Verdict, planner_verdict

__all__ = [
    "PINNED_FILES", "PinnedCheckpoint", "ProfilePin", "RepoSpec", "Verdict", "WeightFiles",
    "parse_spec", "pin_command", "pin_folder", "pinned_checkpoint", "planner_verdict",
    "weight_files", "write_pin",
]
