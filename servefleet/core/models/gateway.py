"""``servefleet:gateway``: one OpenAI-compatible endpoint for the fleet (HAProxy).

The gateway runs on a node of the stack as a deployment of its own (``gateway``). It sends
each request to the deployments serving the request's ``model``, in the order of the routes
below (the first that matches wins; a served model no route names gets one route to every
deployment serving it). Rollouts drain a deployment in the gateway before its engine stops
and re-admit it after its gate::

    config:
      servefleet:gateway:
        node: rtx-5090
        port: 8080
        routes:
          # The long-context lane: big prompts go to the deployment without MTP.
          - model: qwen3.6-35b-a3b
            promptOverBytes: 65536
            to: [dgx-spark-2]
            thinking: false
          - model: qwen3.6-35b-a3b
            header: "x-servefleet-lane: long"
            to: [dgx-spark-2]
          - model: qwen3.6-35b-a3b
            thinking: true
"""

from __future__ import annotations

import re

from pydantic import Field, field_validator, model_validator

from servefleet.core.models.common import Name, SafeToken, StrictModel

HEADER_RE = re.compile(r"^([A-Za-z0-9-]{1,64}):\s*([A-Za-z0-9._~+/=-]{1,128})\Z")
"""``name: value``; both plain tokens, so the rule is safe in HAProxy's configuration."""
TARGET_RE = re.compile(r"^[a-z0-9][a-z0-9_.-]*(/[a-z0-9][a-z0-9_.-]*)?\Z")


class GatewayRoute(StrictModel):
    """Where the requests for one served model go, and what is added to them."""

    model: SafeToken
    """The served model name requests give in ``model`` (a profile's ``served_name``)."""
    header: str | None = None
    """``name: value``: only requests carrying this header (an explicit lane)."""
    prompt_over_bytes: int | None = Field(None, ge=1, le=64 * 1024 * 1024)
    """Only requests whose body is longer than this many bytes (the long-prompt lane; a
    token is about 4 bytes of English text)."""
    to: list[str] = Field(default_factory=list)
    """Deployments (``node`` for its deployments serving the model, or ``node/deployment``)
    the route sends to; empty: every deployment serving ``model``."""
    thinking: bool | None = None
    """Default of ``chat_template_kwargs.enable_thinking`` for chat requests on this route;
    a request that sets it keeps its own. Unset: requests pass unchanged."""

    @field_validator("header")
    @classmethod
    def _header(cls, value: str | None) -> str | None:
        if value is not None and not HEADER_RE.match(value):
            raise ValueError(f"{value!r} is not 'name: value' (letters, digits and '-' in the "
                             "name; a plain token as the value), e.g. 'x-servefleet-lane: long'")
        return value

    @field_validator("to")
    @classmethod
    def _targets(cls, value: list[str]) -> list[str]:
        for item in value:
            if not TARGET_RE.match(item):
                raise ValueError(f"{item!r} is not a node or node/deployment name")
        return value

    @property
    def header_name(self) -> str | None:
        """The header's name, lower-cased (HAProxy compares names without case)."""
        match = HEADER_RE.match(self.header or "")
        return match.group(1).lower() if match else None

    @property
    def header_value(self) -> str | None:
        """The value the header must have."""
        match = HEADER_RE.match(self.header or "")
        return match.group(2) if match else None


class GatewayConfig(StrictModel):
    """The fleet's gateway; without ``node`` the stack has none."""

    node: Name | None = None
    """Node the gateway runs on."""
    port: int = Field(8080, ge=1, le=65535)
    """Port clients send their OpenAI-compatible requests to."""
    admin_port: int = Field(8099, ge=1, le=65535)
    """HAProxy's runtime API, bound to the node's loopback only: servefleet reaches it
    through the SSH connection (a forwarded channel) to drain and re-admit engines."""
    image: SafeToken = "haproxy:2.6"
    """The HAProxy image (2.6 or newer, built with Lua, as the official images are)."""
    routes: list[GatewayRoute] = Field(default_factory=list)
    """Routes in the order they are tried."""
    drain_timeout_seconds: float = Field(120, ge=0, le=3600)
    """How long a drain waits for the requests in flight to finish before the engine is
    stopped anyway."""
    ready_timeout_seconds: float = Field(60, ge=1, le=3600)
    """How long a re-admitted engine may take to pass the gateway's own health check."""
    max_body_bytes: int = Field(1024 * 1024, ge=16384, le=64 * 1024 * 1024)
    """HAProxy's buffer (``tune.bufsize``): requests up to this size are read whole, so
    they can be routed by ``model``, retried and given a thinking default; the memory it
    takes is about twice this per request in flight."""
    retries: int = Field(3, ge=0, le=10)
    """Retries on another engine when a request failed before any response started
    (connection refused or closed, 503)."""

    @model_validator(mode="after")
    def _ports(self) -> GatewayConfig:
        if self.node is not None and self.port == self.admin_port:
            raise ValueError(f"port and adminPort are both {self.port}; give adminPort another "
                             "port")
        return self

    @property
    def enabled(self) -> bool:
        """Whether the stack has a gateway."""
        return self.node is not None
