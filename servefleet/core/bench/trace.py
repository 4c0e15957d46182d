"""A recorded request mix to replay: a timed trace in the Mooncake format, one request a
line (``{"timestamp": 0, "input_length": 6758, "output_length": 500, "hash_ids": [0, 1]}``;
``hash_ids`` optional).

``vllm bench serve`` replays it as its ``timed_trace`` dataset: each request leaves at its
timestamp with a prompt of its input length (requests that share a ``hash_ids`` prefix share
that prefix of prompt tokens, so prefix caching sees what it saw) and asks for its output
length. The trace travels with the bench command, compressed: it is checked here, on the
controller, and a bad line is named before anything runs.
"""

from __future__ import annotations

import base64
import gzip
import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from servefleet.core.errors import ConfigError

MAX_SENT_BYTES = 64 * 1024
"""The compressed trace rides in the node command's arguments, which the kernel limits to
128 KiB in all (with the load program): a longer trace is refused, saying how to cut it."""
MAX_REQUESTS = 100_000


@dataclass(frozen=True)
class Trace:
    """A checked trace: its requests, normalised (one compact JSON object a line)."""

    text: str
    requests: int
    digest: str
    """sha256 of :attr:`text`: part of the scenario's identity."""

    def packed(self) -> str:
        """The text gzip-compressed, base64: what the load program receives."""
        return base64.b64encode(gzip.compress(self.text.encode(), mtime=0)).decode()


def _entry(raw: Any, where: str) -> dict[str, Any]:
    if not isinstance(raw, dict):
        raise ConfigError(f"{where}: expected a JSON object with timestamp, input_length "
                          "and output_length")
    entry: dict[str, Any] = {}
    for field in ("timestamp", "input_length", "output_length"):
        value = raw.get(field)
        if field not in raw:
            raise ConfigError(f"{where}: no '{field}' (a timed trace line has timestamp, "
                              "input_length, output_length and optionally hash_ids)")
        integer = field != "timestamp"
        if isinstance(value, bool) or not isinstance(value, int if integer else (int, float)):
            raise ConfigError(f"{where}: '{field}' is {value!r}; expected "
                              f"{'a whole number of tokens' if integer else 'a number'}")
        if value < (1 if integer else 0):
            raise ConfigError(f"{where}: '{field}' is {value}; expected "
                              f"{'at least 1' if integer else 'at least 0'}")
        entry[field] = value
    hashes = raw.get("hash_ids", [])
    if not isinstance(hashes, list) or not all(
            isinstance(h, int) and not isinstance(h, bool) for h in hashes):
        raise ConfigError(f"{where}: 'hash_ids' must be a list of whole numbers (the prompt "
                          "blocks it shares with other requests)")
    entry["hash_ids"] = hashes
    return entry


def _cover(entries: list[dict[str, Any]], block_tokens: int) -> None:
    """Give every request ``hash_ids`` for its whole prompt: the load generator builds a
    prompt from its blocks only (``block_tokens`` each), so a request whose ids cover less
    would be sent shorter than its ``input_length``. The blocks added are new ids, unique to
    the request: nothing recorded says it shared them."""
    fresh = 1 + max((h for e in entries for h in e["hash_ids"]), default=-1)
    for entry in entries:
        need = -(-entry["input_length"] // block_tokens)
        missing = need - len(entry["hash_ids"])
        if missing > 0:
            entry["hash_ids"] = [*entry["hash_ids"], *range(fresh, fresh + missing)]
            fresh += missing


def _packed_size(lines: list[str]) -> int:
    return len(Trace(text="\n".join(lines) + "\n", requests=len(lines), digest="").packed())


def _most_that_fit(lines: list[str]) -> int:
    """How many first lines of the trace fit :data:`MAX_SENT_BYTES` (a binary search)."""
    low, high = 0, len(lines)
    while low < high:
        middle = (low + high + 1) // 2
        if _packed_size(lines[:middle]) <= MAX_SENT_BYTES:
            low = middle
        else:
            high = middle - 1
    return max(low, 1)


def read_trace(path: Path, display: str, block_tokens: int = 16) -> Trace:
    """The trace at ``path``, every prompt covered by blocks of ``block_tokens``;
    :class:`ConfigError` naming ``display``, the line and the field of a bad line, or saying
    how to cut a trace too long to send."""
    try:
        raw_lines = path.read_text(encoding="utf-8").splitlines()
    except FileNotFoundError:
        raise ConfigError(f"{display}: no such file") from None
    except (OSError, UnicodeDecodeError) as error:
        raise ConfigError(f"{display}: unreadable ({error})") from None
    entries: list[dict[str, Any]] = []
    last = 0.0
    for number, line in enumerate(raw_lines, start=1):
        if not line.strip():
            continue
        where = f"{display}:{number}"
        try:
            raw = json.loads(line)
        except json.JSONDecodeError as error:
            raise ConfigError(f"{where}: not JSON ({error.msg})") from None
        entry = _entry(raw, where)
        if entry["timestamp"] < last:
            raise ConfigError(f"{where}: timestamp {entry['timestamp']} is before the line "
                              f"above ({last}); a trace is in the order requests arrived")
        last = entry["timestamp"]
        entries.append(entry)
    _cover(entries, block_tokens)
    lines = [json.dumps(e, separators=(",", ":")) for e in entries]
    if not lines:
        raise ConfigError(f"{display}: no request in it")
    if len(lines) > MAX_REQUESTS:
        raise ConfigError(f"{display}: {len(lines)} requests; at most {MAX_REQUESTS}")
    text = "\n".join(lines) + "\n"
    trace = Trace(text=text, requests=len(lines),
                  digest=hashlib.sha256(text.encode()).hexdigest())
    sent = len(trace.packed())
    if sent > MAX_SENT_BYTES:
        keep = _most_that_fit(lines)
        raise ConfigError(f"{display}: {len(lines)} requests are {sent // 1024} KiB "
                          f"compressed; a replay sends at most {MAX_SENT_BYTES // 1024} KiB "
                          f"with the bench command: keep its first ~{keep} lines "
                          f"(head -n {keep})")
    return trace
