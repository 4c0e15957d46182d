"""Where a profile's weights come from, pinned, so a rollout can stage them on the node
before the old engine stops (``model.source``).

Three kinds, each pinned so that what a release serves cannot change without a change in
git:

- a **snapshot** of a Hugging Face repository at a commit (40 hex digits: a branch or a tag
  moves upstream), fetched into the node's Hugging Face cache by the real
  ``huggingface_hub`` client and verified against the hashes the hub publishes;
- one **file** of a repository (a GGUF), pinned by its sha256;
- a **URL** of one file, pinned by its sha256.

A file lands in the node's ``models_dir`` under its own name.
"""

from __future__ import annotations

import re
from typing import Literal

from pydantic import field_validator, model_validator

from servefleet.core.models.common import SafeToken, Sha256Hex, StrictModel, Text

COMMIT_RE = re.compile(r"^[0-9a-f]{40}\Z")
REPO_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*\Z")
FILE_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._+-]*\Z")
# The core does no network I/O, urllib included: an https URL is read with a pattern.
HTTPS_URL_RE = re.compile(r"^https://[A-Za-z0-9.-]+(?::\d+)?(/[^\s?#]*)(?:[?#]\S*)?\Z")
REPO_PATH_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._+-]*(?:/[A-Za-z0-9][A-Za-z0-9._+-]*)*\Z")

SourceKind = Literal["snapshot", "file", "url"]


class ModelSource(StrictModel):
    """``model.source``: the pinned origin of the weights a release serves."""

    repo: Text | None = None
    """Hugging Face repository (``org/name``); defaults to ``model.id``."""
    revision: SafeToken | None = None
    """Commit of the repository: required (40 hex digits) for a snapshot; for a file, the
    branch or commit its URL names (``main`` by default; the sha256 pins the content)."""
    file: Text | None = None
    """One file of the repository (``Qwen3.6-35B-A3B-Q4_K_M.gguf``), instead of a snapshot."""
    url: Text | None = None
    """Or an ``https://`` URL of one file."""
    sha256: Sha256Hex | None = None
    """sha256 of the file (``file`` and ``url`` sources); a different download is refused."""

    @field_validator("repo")
    @classmethod
    def _repo_id(cls, value: str | None) -> str | None:
        if value is not None and (not REPO_ID_RE.match(value) or ".." in value):
            raise ValueError(f"{value!r} is not a Hugging Face repository id like 'org/name'")
        return value

    @field_validator("file")
    @classmethod
    def _repo_path(cls, value: str | None) -> str | None:
        if value is not None and (not REPO_PATH_RE.match(value) or ".." in value.split("/")):
            raise ValueError(f"{value!r} is not a path inside a repository "
                             "(letters, digits, . _ + -, folders with /, no '..')")
        return value

    @field_validator("url")
    @classmethod
    def _https(cls, value: str | None) -> str | None:
        if value is None:
            return value
        match = HTTPS_URL_RE.match(value)
        if match is None or not FILE_NAME_RE.match(match[1].rsplit("/", 1)[-1]):
            raise ValueError(f"{value!r} must be an https:// URL whose path ends in a file "
                             "name (letters, digits, . _ + -)")
        return value

    @model_validator(mode="after")
    def _one_kind(self) -> ModelSource:
        if self.url is not None:
            if self.repo is not None or self.file is not None or self.revision is not None:
                raise ValueError("a 'url' source takes only 'sha256': drop 'repo', 'file' "
                                 "and 'revision'")
            if self.sha256 is None:
                raise ValueError("a 'url' source needs 'sha256' (run sha256sum on the file "
                                 "once it is downloaded)")
        elif self.file is not None:
            if self.sha256 is None:
                raise ValueError("a 'file' source needs 'sha256' (the hub shows it on the "
                                 "file's page, under 'SHA256')")
        else:
            if self.sha256 is not None:
                raise ValueError("'sha256' pins one file: give 'file' or 'url' with it, or "
                                 "drop it for a snapshot (pinned by its commit)")
            if self.revision is None or not COMMIT_RE.match(self.revision):
                raise ValueError(
                    f"a snapshot source needs 'revision' as a full commit sha (40 hex "
                    f"digits), not {self.revision!r}: a branch or tag moves upstream and "
                    "would change what a release serves without a change in git (the "
                    "commit is on the repository's 'Files and versions' page, or "
                    "`hf api model_info ORG/NAME`)")
        return self

    @property
    def kind(self) -> SourceKind:
        """``snapshot``, ``file`` or ``url``."""
        if self.url is not None:
            return "url"
        return "file" if self.file is not None else "snapshot"

    @property
    def file_name(self) -> str | None:
        """The name a ``file``/``url`` source lands under in the node's ``models_dir``."""
        if self.url is not None:
            match = HTTPS_URL_RE.match(self.url)
            assert match is not None  # validated
            return match[1].rsplit("/", 1)[-1]
        if self.file is not None:
            return self.file.rsplit("/", 1)[-1]
        return None

    def repo_for(self, model_id: str) -> str:
        """The repository fetched from (``repo``, else the model's id)."""
        return self.repo or model_id

    def pin(self, model_id: str) -> str:
        """One line naming exactly what is staged, for plans and drift."""
        if self.kind == "url":
            return f"{self.url} sha256:{self.sha256}"
        if self.kind == "file":
            return (f"{self.repo_for(model_id)}/{self.file}@{self.revision or 'main'} "
                    f"sha256:{self.sha256}")
        return f"{self.repo_for(model_id)}@{self.revision}"
