"""Short, deterministic answers derived from the prompt (no model runs here)."""

from __future__ import annotations

import hashlib
import re
from typing import Any

_OPENERS = ("Here is a short answer", "In short", "Briefly put", "To answer directly")
_CLOSERS = (
    "That is the gist of it.",
    "Hope this helps.",
    "Let me know if you need more detail.",
    "That covers the main point.",
)
# Words MTP runs may swap between identical requests (seeds: "identical prompts
# produce different outputs" with speculative decoding on).
_SWAPS = (("short", "brief"), ("main", "key"), ("gist", "core"), ("detail", "depth"))
_STOP = {
    "the",
    "a",
    "an",
    "is",
    "are",
    "what",
    "how",
    "why",
    "of",
    "to",
    "in",
    "and",
    "for",
    "please",
    "me",
    "you",
    "your",
    "do",
    "does",
    "can",
    "on",
    "with",
    "about",
    "tell",
    "i",
}


def message_text(content: Any) -> str:
    """Text of an OpenAI message ``content`` (a string or a list of parts)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return " ".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return ""


def prompt_text(messages: list[dict[str, Any]]) -> str:
    """All message texts, as a chat template would concatenate them."""
    return "\n".join(
        f"{m.get('role', 'user')}: {message_text(m.get('content'))}"
        for m in messages
        if isinstance(m, dict)
    )


def last_user_text(messages: list[dict[str, Any]]) -> str:
    """The last user message."""
    for message in reversed(messages):
        if isinstance(message, dict) and message.get("role") == "user":
            return message_text(message.get("content"))
    return ""


def count_tokens(text: str) -> int:
    """A rough token count (words and punctuation), at least 1."""
    return max(1, len(re.findall(r"\w+|[^\w\s]", text)))


def _arithmetic(text: str) -> str | None:
    match = re.search(r"(-?\d+)\s*([+\-*x×/])\s*(-?\d+)", text)
    if not match:
        return None
    a, op, b = int(match.group(1)), match.group(2), int(match.group(3))
    if op == "+":
        result = a + b
    elif op == "-":
        result = a - b
    elif op in ("*", "x", "×"):
        result = a * b
    elif b != 0 and a % b == 0:
        result = a // b
    else:
        return f"{a} / {b} is about {a / b:.4g}." if b else None
    return f"{a} {op} {b} = {result}."


def answer(question: str, variant: int = 0) -> str:
    """The reply to ``question``; ``variant`` > 0 swaps words as an MTP run may."""
    digest = hashlib.sha256(question.encode("utf-8")).digest()
    words = [w for w in re.findall(r"[A-Za-z][A-Za-z0-9'-]*", question) if w.lower() not in _STOP]
    topic = " ".join(words[:4]) or "your question"
    math_part = _arithmetic(question)
    opener = _OPENERS[digest[0] % len(_OPENERS)]
    closer = _CLOSERS[digest[1] % len(_CLOSERS)]
    body = math_part or f"{topic} comes down to a few well-known facts."
    text = f"{opener} about {topic}: {body} {closer}"
    if variant:
        first, second = _SWAPS[(digest[2] + variant) % len(_SWAPS)]
        text = (
            re.sub(rf"\b{first}\b", second, text, count=1)
            if re.search(rf"\b{first}\b", text)
            else text.replace(".", f" ({second}).", 1)
        )
    return text


def reasoning(question: str) -> str:
    """The thinking text that precedes the answer when thinking is on."""
    words = [w for w in re.findall(r"[A-Za-z][A-Za-z0-9'-]*", question) if w.lower() not in _STOP]
    topic = " ".join(words[:4]) or "the question"
    return (
        f"The user asks about {topic}. I should give a short, direct answer and not overthink it."
    )


def truncate_tokens(text: str, max_tokens: int | None) -> tuple[str, bool]:
    """Cut ``text`` to ``max_tokens`` rough tokens; returns (text, truncated)."""
    if max_tokens is None or max_tokens <= 0:
        return text, False
    pieces = re.findall(r"\s*(?:\w+|[^\w\s])", text)
    if len(pieces) <= max_tokens:
        return text, False
    return "".join(pieces[:max_tokens]), True
