"""What ``models pin`` asks the hub for, where the pinned copies live, and which of the
published files are the weights."""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from servefleet.core.errors import ConfigError
from servefleet.core.models.weights import COMMIT_RE, REPO_ID_RE

PINNED_FILES = (
    "config.json", "generation_config.json", "hf_quant_config.json",
    "quantization_config.json", "quant_config.json", "quantize_config.json",
    "model.safetensors.index.json",
)
"""The small files of a checkpoint pinned beside each other, when the revision has them:
the config the planner reads, the sampling defaults vLLM takes from the checkpoint, the
quantization configs (ModelOpt's ``hf_quant_config.json``, AutoAWQ's ``quant_config.json``,
AutoGPTQ's ``quantize_config.json``) and the safetensors index naming the weight shards."""
CONFIG = "config.json"
INDEX = "model.safetensors.index.json"
MODELS_DIR = "models"
"""The pinned copies' folder under ``profiles/`` (``model.config.file`` is relative to
``profiles/``)."""
GIB = 1024**3
_REVISION_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._/-]{0,199}\Z")
_SPLIT_GGUF_RE = re.compile(r"^(?P<stem>.+)-(?P<part>\d{5})-of-(?P<total>\d{5})\.gguf\Z")


@dataclass(frozen=True)
class RepoSpec:
    """``REPO[@REVISION]`` as the operator gave it."""

    repo: str
    """``org/name`` on the hub."""
    revision: str | None
    """Branch, tag or commit; ``None``: the default branch (``main``)."""

    @property
    def asked(self) -> str:
        """The revision asked for, as the hub reads it."""
        return self.revision or "main"


def parse_spec(text: str) -> RepoSpec:
    """``org/name`` or ``org/name@revision``; a :class:`ConfigError` naming the form."""
    repo, at, revision = text.partition("@")
    if not REPO_ID_RE.match(repo) or ".." in repo:
        raise ConfigError(f"{text!r}: expected a Hugging Face repository 'org/name' or "
                          "'org/name@revision' (a branch, tag or commit)")
    if at and (not _REVISION_RE.match(revision) or ".." in revision.split("/")):
        raise ConfigError(f"{text!r}: revision {revision!r} is not a branch, tag or commit "
                          "name (letters, digits, . _ - /)")
    return RepoSpec(repo, revision if at else None)


def pin_folder(repo: str, commit: str) -> str:
    """``models/<org>--<name>@<12 hex digits>``: the folder (relative to ``profiles/``) the
    pinned files of ``repo`` at ``commit`` live in; the folder name says which checkpoint
    and which commit, as the Hugging Face cache's ``models--org--name`` does."""
    if not COMMIT_RE.match(commit):
        raise ConfigError(f"{repo}: the hub answered commit {commit!r}, not 40 hex digits")
    return f"{MODELS_DIR}/{repo.replace('/', '--')}@{commit[:12]}"


@dataclass(frozen=True)
class WeightFiles:
    """The files that hold a revision's weights, and their size as the hub publishes it."""

    kind: Literal["safetensors", "gguf"]
    files: tuple[str, ...]
    total_bytes: int
    how: str
    """How the files were chosen, for the output (``the 4 shards model.safetensors.index.json
    names``)."""

    @property
    def gib(self) -> float:
        """The size in GiB, rounded up to 0.01 GiB (an upper bound, never 0)."""
        return max(0.01, math.ceil(self.total_bytes / GIB * 100) / 100)


def _index_shards(index: bytes, where: str) -> list[str]:
    try:
        data: Any = json.loads(index)
    except ValueError as error:
        raise ConfigError(f"{where}: not JSON ({error})") from None
    weight_map = data.get("weight_map") if isinstance(data, dict) else None
    if not isinstance(weight_map, dict) or not weight_map or \
            not all(isinstance(v, str) for v in weight_map.values()):
        raise ConfigError(f"{where}: no 'weight_map' of tensor → file names")
    return sorted(set(weight_map.values()))


def _gguf_models(names: list[str]) -> dict[str, list[str]]:
    """GGUF files grouped by model: a split model's parts (``-00001-of-00003.gguf``) under
    its first part's name."""
    models: dict[str, list[str]] = {}
    for name in sorted(names):
        match = _SPLIT_GGUF_RE.match(name)
        key = f"{match['stem']}-00001-of-{match['total']}.gguf" if match else name
        models.setdefault(key, []).append(name)
    return models


def weight_files(repo: str, commit: str, sizes: Mapping[str, int | None],
                 index: bytes | None = None, gguf: str | None = None) -> WeightFiles:
    """The weight files of ``repo`` at ``commit`` among ``sizes`` (every file of the
    revision → the size the hub publishes, ``None`` where it gives none).

    Safetensors: the shards ``model.safetensors.index.json`` names (``index``: its bytes),
    else every ``*.safetensors`` at the top level (not ``original/``, ``metal/`` … copies in
    other formats; ``consolidated.safetensors`` only when it is the only one). GGUF: the
    file ``gguf`` names (with its split parts), else the repository's only GGUF model."""
    where = f"{repo}@{commit[:12]}"
    top = [name for name in sizes if "/" not in name]
    if gguf is not None:
        models = _gguf_models([n for n in sizes if n.endswith(".gguf")])
        chosen = models.get(gguf) or next((p for p in models.values() if gguf in p), None)
        if chosen is None:
            raise ConfigError(f"{where}: no GGUF file {gguf!r}; the revision has: "
                              f"{', '.join(models) or 'none'}")
        kind: Literal["safetensors", "gguf"] = "gguf"
        files, how = chosen, f"the GGUF file {gguf}"
    elif index is not None:
        files = _index_shards(index, f"{where}: {INDEX}")
        missing = [name for name in files if name not in sizes]
        if missing:
            raise ConfigError(f"{where}: {INDEX} names {', '.join(missing[:3])}, which the "
                              "revision does not have; pin another revision")
        kind, how = "safetensors", f"the {len(files)} shard(s) {INDEX} names"
    elif safetensors := sorted(n for n in top if n.endswith(".safetensors")):
        if len(safetensors) > 1:
            safetensors = [n for n in safetensors if not n.startswith("consolidated")]
        kind, files = "safetensors", safetensors
        how = f"the {len(files)} *.safetensors file(s) at the top level"
    elif models := _gguf_models([n for n in sizes if n.endswith(".gguf")]):
        if len(models) > 1:
            raise ConfigError(f"{where}: {len(models)} GGUF models ({', '.join(models)}): "
                              "give the one the profile serves with --gguf FILE")
        kind, (first, files) = "gguf", next(iter(models.items()))
        how = f"the GGUF file {first}"
    else:
        raise ConfigError(f"{where}: no *.safetensors nor *.gguf file at this revision, so "
                          "the weights' size cannot be read from the checkpoint; pin the "
                          "revision that carries the weights")
    unknown = [name for name in files if sizes.get(name) is None]
    if unknown:
        raise ConfigError(f"{where}: the hub publishes no size for {', '.join(unknown[:3])}; "
                          "the weights' size is not typed by hand: try again, or another "
                          "endpoint")
    total = sum(int(sizes[name] or 0) for name in files)
    return WeightFiles(kind, tuple(files), total, how)


def pin_command(profile: Any) -> str | None:
    """The exact ``servefleet models pin`` command that pins ``profile``'s checkpoint (its
    staged snapshot's repository and commit, else ``model.id`` at ``model.revision``), or
    ``None`` when ``model.id`` is a label, not a repository (llama.cpp)."""
    model = profile.model
    source = model.source
    repo, revision = model.id, model.revision
    if source is not None and source.kind == "snapshot":
        repo, revision = source.repo_for(model.id), source.revision
    if not REPO_ID_RE.match(repo):
        return None
    at = f"@{revision}" if revision else ""
    return f"servefleet models pin {repo}{at} --profile {profile.name}"
