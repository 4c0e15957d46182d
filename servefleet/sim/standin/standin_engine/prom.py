"""A minimal Prometheus text-format writer (what ``prometheus_client`` exposes)."""

from __future__ import annotations

from dataclasses import dataclass, field


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _number(value: float) -> str:
    if value == float("inf"):
        return "+Inf"
    return repr(float(value))


@dataclass
class Family:
    """One metric family: ``# HELP``/``# TYPE`` and its samples."""

    name: str
    """Family name (for counters without the ``_total`` suffix)."""
    kind: str
    """``counter``, ``gauge`` or ``histogram``."""
    help: str
    """Help text."""
    samples: list[tuple[str, dict[str, str], float]] = field(default_factory=list)
    """(sample name, labels, value)."""

    def add(self, labels: dict[str, str], value: float, suffix: str = "") -> None:
        """Add a sample; counters get ``_total`` unless another suffix is given."""
        name = self.name + (suffix or ("_total" if self.kind == "counter" else ""))
        self.samples.append((name, labels, value))


def render(families: list[Family]) -> str:
    """Prometheus exposition text."""
    out: list[str] = []
    for fam in families:
        shown = fam.name + ("_total" if fam.kind == "counter" else "")
        out.append(f"# HELP {shown} {fam.help}")
        out.append(f"# TYPE {shown} {fam.kind}")
        for name, labels, value in fam.samples:
            if labels:
                text = ",".join(f'{k}="{_escape(v)}"' for k, v in labels.items())
                out.append(f"{name}{{{text}}} {_number(value)}")
            else:
                out.append(f"{name} {_number(value)}")
    return "\n".join(out) + "\n"
