"""One pinned checkpoint: the files to write under ``profiles/``, the sha256 of its
``config.json``, the size of its weights and the planner's verdict, from what the hub
published for one commit."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass

from servefleet.core.errors import ConfigError
from servefleet.core.modelpin.profile_edit import ProfilePin
from servefleet.core.modelpin.spec import CONFIG, INDEX, WeightFiles, pin_folder, weight_files
from servefleet.core.modelpin.verdict import Verdict, planner_verdict
from servefleet.core.project import PROFILES_DIR


@dataclass(frozen=True)
class PinnedCheckpoint:
    """What ``models pin`` writes and says for one commit of a repository."""

    repo: str
    asked: str
    """The revision asked for."""
    commit: str
    folder: str
    """Relative to ``profiles/``: ``models/<org>--<name>@<12 hex digits>``."""
    files: dict[str, bytes]
    """File name → bytes, written into :attr:`folder` as the hub served them."""
    weights: WeightFiles
    verdict: Verdict | None
    """``None``: the revision has no config.json (a GGUF repository)."""

    @property
    def config_file(self) -> str | None:
        """``model.config.file``; ``None`` without a config.json."""
        return f"{self.folder}/{CONFIG}" if CONFIG in self.files else None

    @property
    def config_sha256(self) -> str | None:
        """The sha256 of config.json's bytes, as ``model.config.sha256`` pins it."""
        data = self.files.get(CONFIG)
        return hashlib.sha256(data).hexdigest() if data is not None else None

    def profile_pin(self, *, revision: bool, had_config: bool) -> ProfilePin:
        """The pin for a profile: ``revision`` whether ``model.revision`` is written (not
        when the staged snapshot's ``model.source.revision`` pins it); ``had_config``
        whether the profile (or its parent) pins a config now, which a config the planner
        refuses then replaces with ``null``."""
        plannable = self.verdict is not None and self.verdict.planned
        note = (f"{self.weights.total_bytes:,} bytes of {self.weights.kind} at "
                f"{self.commit[:12]} (servefleet models pin)")
        return ProfilePin(
            revision=self.commit if revision else None, weights_gib=self.weights.gib,
            config_file=self.config_file if plannable else None,
            config_sha256=self.config_sha256 if plannable else None,
            clear_config=had_config and not plannable, note=note)

    @property
    def where(self) -> str:
        """``profiles/models/<folder>/`` for messages."""
        return f"{PROFILES_DIR}/{self.folder}/"


def pinned_checkpoint(repo: str, asked: str, commit: str, sizes: Mapping[str, int | None],
                      files: Mapping[str, bytes], gguf: str | None = None,
                      ) -> PinnedCheckpoint:
    """The pin of ``repo`` at ``commit`` from the hub's file sizes and the small files'
    bytes; a :class:`ConfigError` when config.json is not a JSON object or the weights'
    size cannot be read from the checkpoint."""
    folder = pin_folder(repo, commit)
    weights = weight_files(repo, commit, sizes, files.get(INDEX) if gguf is None else None,
                           gguf)
    verdict = None
    if CONFIG in files:
        source = f"{PROFILES_DIR}/{folder}/{CONFIG}"
        try:
            config = json.loads(files[CONFIG])
        except ValueError as error:
            raise ConfigError(f"{repo}@{commit[:12]}: {CONFIG} is not JSON ({error})") \
                from None
        if not isinstance(config, dict):
            raise ConfigError(f"{repo}@{commit[:12]}: {CONFIG} is not a JSON object")
        verdict = planner_verdict(config, source, files.get("hf_quant_config.json"))
    elif weights.kind == "safetensors":
        raise ConfigError(f"{repo}@{commit[:12]}: no {CONFIG} at this revision; a "
                          "safetensors checkpoint needs one (pin the revision that has it)")
    return PinnedCheckpoint(repo=repo, asked=asked, commit=commit, folder=folder,
                            files=dict(files), weights=weights, verdict=verdict)
