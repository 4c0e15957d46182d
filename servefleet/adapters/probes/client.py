"""The probes' HTTP: one request, one :class:`HttpAnswer`, whatever happened."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

GET_TIMEOUT_SECONDS = 5.0
SHOWN_BODY = 200
API_KEY_SECRETS = ("VLLM_API_KEY", "LLAMA_API_KEY")
"""Secret names whose value the probes send as ``Authorization: Bearer``."""


@dataclass(frozen=True)
class HttpAnswer:
    """What one request got."""

    status: int
    """HTTP status; 0 when nothing answered."""
    body: bytes = b""
    """The response body."""
    error: str | None = None
    """Why nothing answered (``connection refused``, ``timed out``)."""

    @property
    def answered(self) -> bool:
        """An HTTP status came back."""
        return self.status > 0

    def shown(self) -> str:
        """``HTTP 503 <start of body>`` or ``no answer (<why>)``, for rows."""
        if not self.answered:
            return f"no answer ({self.error})"
        text = " ".join(self.body[:SHOWN_BODY].decode("utf-8", "replace").split())
        return f"HTTP {self.status}" + (f" {text}" if text else "")

    def json(self) -> Any:
        """The body as JSON; :class:`ValueError` when it is not."""
        return json.loads(self.body)


Send = Callable[[urllib.request.Request, float], HttpAnswer]


def urlopen(request: urllib.request.Request, timeout: float) -> HttpAnswer:
    """Send ``request``; every outcome is an answer (status 0 when nothing answered)."""
    # No proxies: engines sit on the operator's own network.
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(request, timeout=timeout) as response:
            return HttpAnswer(response.status, response.read())
    except urllib.error.HTTPError as error:
        return HttpAnswer(error.code, error.read())
    except urllib.error.URLError as error:
        return HttpAnswer(0, error=str(error.reason))
    except (OSError, ValueError) as error:
        return HttpAnswer(0, error=str(error) or type(error).__name__)


@dataclass
class EngineClient:
    """Talks HTTP to one engine at ``base_url`` (``http://host:port``)."""

    base_url: str
    """``http://<node address>:<port>``."""
    api_key: str | None = field(default=None, repr=False)
    """Sent as ``Authorization: Bearer`` when set; never shown."""
    timeout: float = GET_TIMEOUT_SECONDS
    """Timeout of a GET."""
    send: Send = urlopen
    """How a request is sent (a test may record them)."""

    def _request(self, path: str, data: bytes | None = None) -> urllib.request.Request:
        headers = {"Accept": "application/json"}
        if data is not None:
            headers["Content-Type"] = "application/json"
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        return urllib.request.Request(self.base_url.rstrip("/") + path, data=data,
                                      headers=headers, method="POST" if data else "GET")

    def get(self, path: str, timeout: float | None = None) -> HttpAnswer:
        """``GET path``."""
        return self.send(self._request(path), timeout or self.timeout)

    def post_json(self, path: str, payload: dict[str, Any], timeout: float) -> HttpAnswer:
        """``POST path`` with a JSON body."""
        return self.send(self._request(path, json.dumps(payload).encode()), timeout)

