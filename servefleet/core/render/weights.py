"""Weight staging, as data: what a release fetches onto its node before the old engine
stops, where it lands, and the one-shot container that fetches it.

A profile's ``model.source`` (:mod:`servefleet.core.models.weights`) becomes a
:class:`WeightsSpec` for one node. The release's compose file gets a ``weights`` service
that ``up`` never starts (a Compose profile of that name): the rollout runs it once, in the
engine's own image, while the old engine still serves. A snapshot is fetched by the real
``huggingface_hub`` client (every vLLM image has it) into the node's Hugging Face cache; a
file by ``curl`` (llama.cpp's images have no Python) into the node's ``models_dir``. The
engine then boots with ``HF_HUB_OFFLINE=1``: a boot can never fetch.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any, Literal

from servefleet.core.models import Node, Profile
from servefleet.core.models.weights import SourceKind
from servefleet.core.render.layout import HF_CACHE_TARGET, MODELS_TARGET

WeightsTool = Literal["python", "sh"]

WEIGHTS_SERVICE = "weights"
"""The compose service (and Compose profile) that stages a release's weights."""
OFFLINE_ENV = {"HF_HUB_OFFLINE": "1"}
"""The engine's environment when its weights were staged: the hub is never asked at boot."""
TOOLS: Mapping[SourceKind, WeightsTool] = {"snapshot": "python", "file": "sh", "url": "sh"}
"""Which fetcher stages each kind: ``python`` (``python3`` with ``huggingface_hub``, as in
vLLM's images) or ``sh`` (``sh``, ``curl`` and ``sha256sum``, as in llama.cpp's)."""
ENTRYPOINTS: Mapping[WeightsTool, tuple[str, ...]] = {
    "python": ("python3", "-u", "-"),
    "sh": ("sh", "-s"),
}
"""The staging container's entrypoint: the fetcher program arrives on standard input, so a
new servefleet never changes a release's files (nor its id)."""


@dataclass(frozen=True)
class WeightsSpec:
    """What one release stages on one node."""

    kind: SourceKind
    """``snapshot``, ``file`` or ``url``."""
    pin: str
    """One line naming exactly what is staged (``org/name@<commit>``…)."""
    tool: WeightsTool
    """The fetcher that runs in the staging container."""
    host_folder: str
    """The node's folder the weights land in (``hf_cache`` or ``models_dir``)."""
    container_folder: str
    """Where that folder is mounted in the staging container (and the engine's)."""
    repo: str | None = None
    revision: str | None = None
    file: str | None = None
    url: str | None = None
    sha256: str | None = None
    file_name: str | None = None
    """A file's name in ``models_dir`` (``file``/``url`` kinds)."""
    endpoint: str | None = None
    """``HF_ENDPOINT`` of the node, when it names one."""

    def environment(self) -> dict[str, str]:
        """The staging container's environment (no secret: the token comes from the
        release's ``engine.env``)."""
        values = {
            "SERVEFLEET_WEIGHTS_KIND": self.kind,
            "SERVEFLEET_WEIGHTS_REPO": self.repo,
            "SERVEFLEET_WEIGHTS_REVISION": self.revision,
            "SERVEFLEET_WEIGHTS_FILE": self.file,
            "SERVEFLEET_WEIGHTS_URL": self.url,
            "SERVEFLEET_WEIGHTS_SHA256": self.sha256,
            "SERVEFLEET_WEIGHTS_DEST": self.destination,
            "HF_ENDPOINT": self.endpoint,
            # The staging container prints its own progress lines; the client's bars would
            # flood the deploy's output with carriage returns.
            "HF_HUB_DISABLE_PROGRESS_BARS": "1",
            "HF_HUB_DISABLE_TELEMETRY": "1",
        }
        return {name: value for name, value in sorted(values.items()) if value is not None}

    @property
    def destination(self) -> str:
        """Inside the container: the hub cache (snapshot) or the file's path."""
        if self.kind == "snapshot":
            return f"{self.container_folder}/hub"
        return f"{self.container_folder}/{self.file_name}"

    @property
    def hub_source(self) -> str:
        """``from huggingface.co`` (or the node's endpoint, or the file's URL): where the
        fetcher takes the weights when no neighbour holds them."""
        return "from " + ("its URL" if self.kind == "url" else self.endpoint or
                          "huggingface.co")

    @property
    def host_path(self) -> str:
        """On the node: the snapshot's folder in the hub cache, or the staged file."""
        if self.kind == "snapshot":
            assert self.repo is not None and self.revision is not None
            return f"{self.host_folder}/hub/{cache_folder(self.repo)}/snapshots/{self.revision}"
        return f"{self.host_folder}/{self.file_name}"

    def to_json(self) -> dict[str, Any]:
        """For the release's manifest."""
        return {key: value for key, value in asdict(self).items() if value is not None}

    @staticmethod
    def from_json(data: object) -> WeightsSpec | None:
        """A manifest's ``weights`` entry, or ``None`` when it holds none (or garbage)."""
        if not isinstance(data, dict):
            return None
        try:
            return WeightsSpec(**{key: value for key, value in data.items()
                                  if key in WeightsSpec.__dataclass_fields__})
        except TypeError:
            return None


def cache_folder(repo: str) -> str:
    """The hub cache's folder of a model repository (``models--org--name``)."""
    return "models--" + repo.replace("/", "--")


def weights_for(profile: Profile, node: Node) -> WeightsSpec | None:
    """What ``profile`` stages on ``node``, or ``None`` when it names no source. Rules
    (:mod:`servefleet.core.rules.weights`) have already refused a source the node cannot
    take (a file without ``models_dir``)."""
    source = profile.model.source
    if source is None:
        return None
    snapshot = source.kind == "snapshot"
    if not snapshot and node.models_dir is None:
        return None
    return WeightsSpec(
        kind=source.kind, pin=source.pin(profile.model.id), tool=TOOLS[source.kind],
        host_folder=node.hf_cache if snapshot else str(node.models_dir),
        container_folder=HF_CACHE_TARGET if snapshot else MODELS_TARGET,
        repo=None if source.kind == "url" else source.repo_for(profile.model.id),
        revision=source.revision if snapshot else (
            None if source.kind == "url" else source.revision or "main"),
        file=source.file, url=source.url, sha256=source.sha256,
        file_name=source.file_name, endpoint=node.hf_endpoint)
