"""``servefleet:gateway`` in a stack file: read with the operator's camelCase keys, and
every mistake named by its field."""

from __future__ import annotations

from pathlib import Path

from servefleet.core.project import load_stack


def _stack(tmp_path: Path, gateway: str) -> tuple[object, list[str]]:
    (tmp_path / "Pulumi.x.yaml").write_text(
        "config:\n  servefleet:profiles:\n    a: p\n  servefleet:gateway:\n" + gateway)
    stack, _, problems = load_stack(tmp_path, "x")
    return stack, problems


def test_routes_are_read_with_their_camel_case_keys(tmp_path: Path) -> None:
    stack, problems = _stack(tmp_path, (
        "    node: a\n    port: 9000\n    drainTimeoutSeconds: 30\n    routes:\n"
        "      - {model: m, promptOverBytes: 65536, to: [a], thinking: false}\n"
        "      - {model: m, header: 'x-servefleet-lane: long'}\n"))
    assert not problems
    config = stack.gateway  # type: ignore[attr-defined]
    assert config.port == 9000 and config.drain_timeout_seconds == 30
    assert config.routes[0].prompt_over_bytes == 65536 and config.routes[0].thinking is False
    assert (config.routes[1].header_name, config.routes[1].header_value) == \
        ("x-servefleet-lane", "long")


def test_a_wrong_route_field_is_named_with_its_position(tmp_path: Path) -> None:
    _, problems = _stack(tmp_path, "    node: a\n    routes:\n      - {model: m, thinkng: true}\n")
    assert problems == ["Pulumi.x.yaml: servefleet:gateway.routes.0.thinkng: unknown field "
                        "(`servefleet schema stack` lists the fields)"]


def test_a_header_that_could_break_the_config_is_refused_with_an_example(tmp_path: Path) -> None:
    _, problems = _stack(tmp_path, "    node: a\n    routes:\n"
                                   "      - {model: m, header: 'x-lane: a b } or { always'}\n")
    assert len(problems) == 1
    assert "servefleet:gateway.routes.0.header" in problems[0]
    assert "e.g. 'x-servefleet-lane: long'" in problems[0]


def test_the_same_port_for_clients_and_the_runtime_api_is_refused(tmp_path: Path) -> None:
    _, problems = _stack(tmp_path, "    node: a\n    port: 8099\n")
    assert len(problems) == 1 and "give adminPort another port" in problems[0]


def test_a_stack_without_the_block_has_no_gateway(tmp_path: Path) -> None:
    (tmp_path / "Pulumi.x.yaml").write_text("config:\n  servefleet:profiles:\n    a: p\n")
    stack, _, problems = load_stack(tmp_path, "x")
    assert stack is not None and not stack.gateway.enabled and not problems
