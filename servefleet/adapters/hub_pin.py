"""Read what ``models pin`` needs from a Hugging Face hub (or a mirror) with the real
``huggingface_hub`` client: the commit a revision points to, every file of that commit with
the size the hub publishes, and the bytes of the checkpoint's small files
(:data:`~servefleet.core.modelpin.PINNED_FILES`). Nothing is cached: the files are fetched
into a temporary folder and returned as bytes. The token is the caller's (``HF_TOKEN``) and
never appears in an error: every message is built here and masked."""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from pathlib import Path

from servefleet.core.errors import ServefleetError
from servefleet.core.modelpin import PINNED_FILES
from servefleet.core.secrets import SecretMask

DEFAULT_ENDPOINT = "https://huggingface.co"
TOKEN_VARS = ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN")
"""Where the token is read from, first set wins (``huggingface_hub``'s own names)."""
TIMEOUT_S = 30.0


class HubError(ServefleetError):
    """The hub refused or could not answer what ``models pin`` asked."""


@dataclass(frozen=True)
class HubCheckpoint:
    """One revision of a repository as the hub publishes it."""

    repo: str
    asked: str
    """The revision asked for (a branch, tag or commit)."""
    commit: str
    """The commit it resolved to (40 hex digits)."""
    sizes: dict[str, int | None]
    """Every file of the commit → its size (``None`` where the hub gives none)."""
    files: dict[str, bytes]
    """The bytes of each of :data:`PINNED_FILES` the commit has."""
    endpoint: str


def _explain(error: Exception, repo: str, asked: str, endpoint: str, token: str | None,
             ) -> HubError:
    """One line for a failed hub call, naming the fix; the token masked out."""
    from huggingface_hub import errors

    mask = SecretMask([token] if token else [])
    status = getattr(getattr(error, "response", None), "status_code", None)
    where = f"{repo}@{asked} on {endpoint}"
    if isinstance(error, errors.GatedRepoError) or (
            isinstance(error, errors.HfHubHTTPError) and status in (401, 403)):
        if token:
            text = (f"{where}: the hub refused the token in HF_TOKEN (HTTP {status}): it is "
                    "gated or private and this token has no read access to it; accept its "
                    "licence on the hub with the token's account, or use a token that can "
                    "read it")
        else:
            text = (f"{where}: the hub answered HTTP {status}: the repository is gated or "
                    "private and no token was given; set HF_TOKEN to a token with read "
                    "access (export HF_TOKEN=…; it is read from the environment and never "
                    "written anywhere)")
    elif isinstance(error, errors.RepositoryNotFoundError):
        text = (f"{where}: no such repository (HTTP {status}); check the name (org/name, as "
                "in the hub's URL) or the endpoint")
    elif isinstance(error, errors.RevisionNotFoundError):
        text = (f"{where}: no revision {asked!r} in {repo} (HTTP {status}); give a branch, a "
                "tag or a commit the repository has (its 'Files and versions' page lists "
                "them), or leave '@…' out for main")
    elif isinstance(error, errors.HfHubHTTPError):
        text = f"{where}: the hub answered HTTP {status}; try again, or another endpoint"
    else:
        reason = " ".join(str(error).split())[:200] or type(error).__name__
        text = (f"{where}: cannot reach the hub ({type(error).__name__}: {reason}); check "
                "--endpoint / HF_ENDPOINT and the network")
    return HubError(mask(text))


def read_checkpoint(repo: str, revision: str | None, endpoint: str, token: str | None,
                    ) -> HubCheckpoint:
    """The commit ``revision`` (``None``: main) of ``repo`` points to, its files' sizes and
    the bytes of its small files, from ``endpoint``; a :class:`HubError` saying why not."""
    from huggingface_hub import HfApi, hf_hub_download

    asked = revision or "main"
    # token=False: no token at all (not the one a `hf auth login` left on this machine).
    auth: str | bool = token if token else False
    try:
        info = HfApi(endpoint=endpoint, token=auth).model_info(
            repo, revision=asked, files_metadata=True, timeout=TIMEOUT_S)
        commit = info.sha
        if commit is None:
            raise HubError(f"{repo}@{asked} on {endpoint}: the hub named no commit for this "
                           "revision; pin a commit (REPO@<40 hex digits>)")
        sizes = {s.rfilename: s.size for s in info.siblings or ()}
        files: dict[str, bytes] = {}
        with tempfile.TemporaryDirectory(prefix="servefleet-pin-") as cache:
            for name in PINNED_FILES:
                if name not in sizes:
                    continue
                path = hf_hub_download(repo, name, revision=commit, cache_dir=cache,
                                       endpoint=endpoint, token=auth, etag_timeout=TIMEOUT_S)
                files[name] = Path(path).read_bytes()
    except HubError:
        raise
    except Exception as error:  # the client's errors vary by version; each becomes one line
        raise _explain(error, repo, asked, endpoint, token) from None
    return HubCheckpoint(repo=repo, asked=asked, commit=commit, sizes=sizes, files=files,
                         endpoint=endpoint)
