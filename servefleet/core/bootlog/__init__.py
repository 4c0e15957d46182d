"""Engine boot-log parsing: what a vLLM, SGLang or llama.cpp boot log proves.

The parser streams (feed bytes, ask for facts at any time) so that a rollout can follow a
log and stop as soon as the engine is ready or has failed; :func:`parse_file` and
:func:`parse_text` parse a whole log. Facts follow the ``servefleet logs parse --json``
contract in DESIGN.md; every fact carries the log lines that prove it.
"""

from servefleet.core.bootlog.model import (
    CONTRACT_KEYS,
    BootFacts,
    Engine,
    Evidence,
    FailureClass,
    LlamaCppExtra,
    Outcome,
    SglangExtra,
    SpecDecodeMetrics,
    VllmExtra,
)
from servefleet.core.bootlog.parser import (
    ENGINE_CHOICES,
    BootLogParser,
    parse_bytes,
    parse_file,
    parse_text,
    reader_for,
)

__all__ = [
    "CONTRACT_KEYS",
    "ENGINE_CHOICES",
    "BootFacts",
    "BootLogParser",
    "Engine",
    "Evidence",
    "FailureClass",
    "LlamaCppExtra",
    "Outcome",
    "SglangExtra",
    "SpecDecodeMetrics",
    "VllmExtra",
    "parse_bytes",
    "parse_file",
    "parse_text",
    "reader_for",
]
