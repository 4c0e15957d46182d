"""Did-you-mean suggestions for names an operator typed: fields, profiles, nodes, stacks."""

from __future__ import annotations

import difflib
from collections.abc import Iterable


def closest(word: str, choices: Iterable[str]) -> str | None:
    """The known name closest to ``word`` (difflib, ratio ≥ 0.6), or None."""
    found = difflib.get_close_matches(word, sorted(set(choices)), n=1, cutoff=0.6)
    return found[0] if found else None


def did_you_mean(word: str, choices: Iterable[str]) -> str:
    """``"did you mean 'x'?; "`` when a known name is close, else ``""``: the start of a
    parenthesised hint, e.g. ``(did you mean 'qwen36-fp8'?; known: …)``."""
    match = closest(word, choices)
    return f"did you mean {match!r}?; " if match is not None else ""


def unknown_name(kind: str, word: str, choices: Iterable[str], where: str) -> str:
    """``no profile 'x' in profiles/ (did you mean 'y'?; known: a, b)``."""
    known = sorted(set(choices))
    return (f"no {kind} {word!r} in {where} ({did_you_mean(word, known)}"
            f"known: {', '.join(known) or 'none'})")
