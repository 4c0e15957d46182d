"""The gateway's files rendered from the reference stack: routes resolved against its
deployments, every mistake refused with what the stack does serve, a release id that
follows the content, and a configuration the real HAProxy accepts."""

from __future__ import annotations

import dataclasses
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from servefleet.core.errors import ConfigError
from servefleet.core.gateway.render import render_gateway
from servefleet.core.gateway.routes import resolve_routes, servers_of
from servefleet.core.models.gateway import GatewayConfig
from servefleet.core.project import Project, load_project
from servefleet.core.watch.config import snake_keys
from tests.reference_project import REPO_ROOT


def _project(**gateway: Any) -> Project:
    project = load_project(REPO_ROOT, "reference")
    config = GatewayConfig.model_validate(snake_keys({"node": "rtx5090", "port": 8080,
                                                      **gateway}))
    return dataclasses.replace(project, stack=project.stack.model_copy(
        update={"gateway": config}))


def test_every_served_model_gets_a_route_to_all_its_deployments() -> None:
    routes = resolve_routes(_project())
    assert [(r.name, r.route.model, [b.key for b in r.backends]) for r in routes] == [
        ("m0", "qwen36", ["dgx-spark-1/main", "dgx-spark-1/nomtp", "dgx-spark-2/main"]),
        ("m1", "qwen36-q4", ["rtx5090/main"])]


def test_a_lane_route_keeps_the_catch_all_and_a_node_names_its_deployments() -> None:
    routes = resolve_routes(_project(routes=[
        {"model": "qwen36", "promptOverBytes": 1000, "to": ["dgx-spark-1/nomtp"]},
        {"model": "qwen36", "to": ["dgx-spark-2", "dgx-spark-1/main"], "thinking": True}]))
    assert [(r.name, [b.server for b in r.backends]) for r in routes] == [
        ("r0", ["dgx-spark-1.nomtp"]), ("r1", ["dgx-spark-2.main", "dgx-spark-1.main"]),
        ("m2", ["rtx5090.main"])]
    assert servers_of(routes, "dgx-spark-1", "nomtp") == [("r0", "dgx-spark-1.nomtp")]


@pytest.mark.parametrize(("gateway", "message"), [
    ({"routes": [{"model": "llama"}]},
     "routes[0].model: no deployment of this stack serves 'llama' (served: qwen36, qwen36-q4)"),
    ({"routes": [{"model": "qwen36", "to": ["rtx5090"]}]},
     "routes[0].to: 'rtx5090' serves no 'qwen36' in this stack (deployments serving it: "
     "dgx-spark-1/main, dgx-spark-1/nomtp, dgx-spark-2/main)"),
    ({"port": 8000}, "servefleet:gateway.port: 8000 is the port of rtx5090/main"),
    ({"node": "dgx-spark-9"}, "'dgx-spark-9' is not a node of this project"),
])
def test_routes_naming_what_the_stack_does_not_serve_are_refused(
        gateway: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError) as caught:
        render_gateway(_project(**gateway))
    assert message in str(caught.value)


def test_release_id_follows_the_content_only() -> None:
    first = render_gateway(_project())
    assert render_gateway(_project()).release_id == first.release_id
    other = render_gateway(_project(routes=[{"model": "qwen36", "thinking": False}]))
    assert other.release_id != first.release_id
    assert first.release_id.encode() in first.files["compose.yaml"]


def test_the_real_haproxy_accepts_the_rendered_configuration(
        need_program: Callable[[str], str], tmp_path: Path) -> None:
    haproxy = need_program("haproxy")
    rendered = render_gateway(_project(routes=[
        {"model": "qwen36", "promptOverBytes": 65536, "to": ["dgx-spark-1/nomtp"],
         "thinking": False},
        {"model": "qwen36", "header": "x-servefleet-lane: long", "to": ["dgx-spark-1/nomtp"]},
        {"model": "qwen36", "thinking": True}]))
    for name, content in rendered.files.items():
        (tmp_path / name).write_bytes(content)
    config = tmp_path / "haproxy.cfg"
    config.write_text(config.read_text().replace("/usr/local/etc/haproxy/", f"{tmp_path}/"))
    # The reference nodes' names do not resolve here: HAProxy starts them down (init-addr).
    checked = subprocess.run([haproxy, "-c", "-f", str(config)], capture_output=True,
                             text=True, check=False)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "Configuration file is valid" in checked.stdout
