"""Every real boot log in the shared fixtures parses to the facts its MANIFEST entry lists.

How MANIFEST keys map onto the parser's output:

* contract keys compare with the contract field of ``to_json_dict()``; MANIFEST writes an
  undecided outcome as null, the contract as ``incomplete``;
* ``engine_version_logged`` is the contract's ``engine_version``;
* ``failure_reason`` is free text quoting the proving line; ``(...)`` marks where MANIFEST
  shortened it, so the parsed reason must start with the text before the first ``(...)``
  and contain every later piece in order; without ``(...)`` it must be equal;
* ``flash_attn`` is a string in MANIFEST (``"auto -> enabled"``) but a boolean in the
  contract: the string must equal ``extra.flash_attn_setting`` and the boolean the decision
  it ends with;
* every other key compares with ``extra``; keys the parser does not produce are reported
  as a warning (not silently dropped).

Numbers must be numbers of the same kind (an int stays an int), booleans booleans.
"""

from __future__ import annotations

import hashlib
import warnings
from pathlib import Path
from typing import Any

from servefleet.core.bootlog import CONTRACT_KEYS, parse_file
from servefleet.core.bootlog.lines import strip_ansi


def same(parsed: Any, expected: Any) -> bool:
    """Equality that does not let True pass for 1 or "3" for 3."""
    if isinstance(expected, bool) or isinstance(parsed, bool):
        return type(parsed) is type(expected) and parsed == expected
    if isinstance(expected, int):
        return type(parsed) is int and parsed == expected
    if isinstance(expected, float):
        return type(parsed) in (int, float) and parsed == expected
    if isinstance(expected, list):
        return (isinstance(parsed, list) and len(parsed) == len(expected)
                and all(same(p, e) for p, e in zip(parsed, expected, strict=True)))
    return type(parsed) is type(expected) and parsed == expected


def reason_matches(parsed: str | None, expected: str | None) -> bool:
    """MANIFEST's free-text reason against the parsed one (see the module docstring)."""
    if expected is None or parsed is None:
        return parsed == expected
    if "(...)" not in expected:
        return parsed == expected
    pieces = [piece.strip() for piece in expected.split("(...)")]
    if not parsed.startswith(pieces[0]):
        return False
    at = len(pieces[0])
    for piece in pieces[1:]:
        if piece:
            at = parsed.find(piece, at)
            if at < 0:
                return False
            at += len(piece)
    return True


def flash_attn_decision(setting: str) -> bool | None:
    """``"auto -> enabled"`` -> True; ``"0"`` -> False; ``"auto"`` -> None."""
    final = setting.split("->")[-1].strip().lower()
    if final in ("enabled", "on", "1", "true"):
        return True
    if final in ("disabled", "off", "0", "false"):
        return False
    return None


def check(key: str, expected: Any, out: dict[str, Any]) -> str | None:
    """A mismatch description, or None when the parsed output agrees."""
    extra = out["extra"]
    if key == "outcome":
        want = "incomplete" if expected is None else expected
        return None if out["outcome"] == want else f"outcome {out['outcome']!r} != {want!r}"
    if key == "failure_reason":
        got = out["failure_reason"]
        return None if reason_matches(got, expected) else f"failure_reason {got!r} != {expected!r}"
    if key == "flash_attn" and isinstance(expected, str):
        setting, decision = extra.get("flash_attn_setting"), out["flash_attn"]
        if setting != expected or decision is not flash_attn_decision(expected):
            return f"flash_attn {decision!r}/{setting!r} != {expected!r}"
        return None
    if key in CONTRACT_KEYS:
        got = out[key]
    elif key == "engine_version_logged":
        got = out["engine_version"]
    elif key in extra:
        got = extra[key]
    else:
        warnings.warn(f"MANIFEST key {key!r} is not produced by the parser", stacklevel=2)
        return None
    return None if same(got, expected) else f"{key}: parsed {got!r} != expected {expected!r}"


def test_log_parses_to_manifest_facts(manifest_entry: dict[str, Any]) -> None:
    entry = manifest_entry
    path: Path = entry["path"]
    data = path.read_bytes()
    assert hashlib.sha256(data).hexdigest() == entry["sha256"], "fixture changed on disk"
    out = parse_file(path).to_json_dict()

    assert out["engine"] == entry["engine"].split()[0], "engine auto-detection"
    assert list(out)[: len(CONTRACT_KEYS)] == list(CONTRACT_KEYS)
    problems = [p for key, value in entry["expected"].items() if (p := check(key, value, out))]
    assert not problems, "\n".join(problems)


def test_manifest_evidence_lines_are_in_the_log(manifest_entry: dict[str, Any]) -> None:
    """Every evidence line the parser reports is really at that line number."""
    path: Path = manifest_entry["path"]
    lines = path.read_bytes().split(b"\n")
    facts = parse_file(path)
    assert facts.evidence, "no evidence at all"
    for name, items in facts.evidence.items():
        for item in items:
            physical = strip_ansi(lines[item.line - 1].decode("utf-8", "replace"))
            core = item.text.strip("…")[:60]
            assert core in physical, f"{name}: line {item.line} does not hold {item.text!r}"
