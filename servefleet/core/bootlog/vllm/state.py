"""What a vLLM log has shown so far, and the facts and extras it makes of that."""

from __future__ import annotations

import re
from typing import Any

from servefleet.core.bootlog.lines import LogLine
from servefleet.core.bootlog.model import SpecDecodeMetrics, VllmExtra
from servefleet.core.bootlog.rules import EngineState, excerpt

Rx = tuple[re.Pattern[str], ...]
"""A rule's compiled regexes, as its handler gets them."""


class VllmState(EngineState):
    """What a vLLM log has shown so far."""

    def __init__(self) -> None:
        super().__init__()
        self.version_rank = 0
        self.generation: str | None = None
        self.architectures: list[str] = []
        self.weights_process: str | None = None
        self.drafter_loading: set[str] = set()
        self.mode: str | None = None
        self.mode_source: str | None = None
        self.mode_downgraded = False
        self.backend_forced = False
        self.capture_kinds: set[tuple[str, str]] = set()
        self.spec_true = False
        self.spec_false = False
        self.server = False
        self.spec_lines = 0
        self.spec_first: float | None = None
        self.spec_last: float | None = None
        self.spec_accepted = 0
        self.spec_drafted = 0
        self.spec_positions: tuple[float, ...] = ()

    def set_version(self, version: str, rank: int, line: LogLine, start: int, end: int) -> None:
        """Keep the most authoritative version statement (API server/banner > engine
        init line > container banner)."""
        if rank > self.version_rank:
            self.version_rank = rank
            self.last("engine_version", version, excerpt(line, start, end))

    def set_mode(self, mode: str, source: str, line: LogLine, start: int = 0,
                 end: int = 0) -> None:
        """A CUDA-graph mode statement; once downgraded, configuration dumps (printed by
        processes that never saw the downgrade) no longer override it."""
        if self.mode_downgraded and source != "downgrade":
            return
        self.mode, self.mode_source = mode, source
        self.mode_downgraded = self.mode_downgraded or source == "downgrade"
        self.last("cudagraph_mode", mode, excerpt(line, start, end))

    def final_mode(self) -> tuple[str | None, str | None]:
        """(mode, source): the last statement, else what the capture progress bars imply."""
        if self.mode is None and self.capture_kinds:
            return _mode_from_capture(self.capture_kinds), "capture_progress"
        return self.mode, self.mode_source

    def contract(self) -> dict[str, Any]:
        values = dict(self.values)
        values["cudagraph_mode"] = self.final_mode()[0]
        values["spec_decode"] = self.spec_decode
        return values

    @property
    def spec_decode(self) -> bool | None:
        """True on any sign of a drafter, False when the config says none, else unknown."""
        if self.spec_true:
            return True
        return False if self.spec_false else None

    def build_extra(self) -> VllmExtra:
        get = self.get
        spec = self.spec_decode
        draft = None
        if spec and self.architectures:
            draft = next((a for a in self.architectures[1:] if a != self.architectures[0]), None)
        # V0 never prints the init-engine line; V1 logs without it did not finish init.
        init_completed = None if self.generation == "v0" else "init_engine_seconds" in self.values
        metrics = None
        if self.spec_lines:
            metrics = SpecDecodeMetrics(
                lines=self.spec_lines,
                mean_acceptance_length_first=self.spec_first,
                mean_acceptance_length_last=self.spec_last,
                accepted_tokens=self.spec_accepted,
                drafted_tokens=self.spec_drafted,
                acceptance_rate=(round(self.spec_accepted / self.spec_drafted, 4)
                                 if self.spec_drafted else None),
                per_position_acceptance_last=self.spec_positions,
            )
        method = get("spec_decode_method")
        if method is None and get("mtp_detected"):
            method = "mtp"
        return VllmExtra(
            engine_generation=self.generation,
            available_kv_cache_gib=get("available_kv_cache_gib"),
            gpu_blocks=get("gpu_blocks"),
            cpu_blocks=get("cpu_blocks"),
            kv_cache_device=get("kv_cache_device"),
            kv_cache_tokens_basis=_tokens_basis(get("engine_version"))
            if "kv_cache_tokens" in self.values else None,
            max_model_len=get("max_model_len"),
            graph_capture_seconds=get("graph_capture_seconds"),
            graph_capture_gib=get("graph_capture_gib"),
            init_engine_seconds=get("init_engine_seconds"),
            compilation_seconds=get("compilation_seconds"),
            engine_init_completed=init_completed,
            cudagraph_mode_source=self.final_mode()[1],
            moe_default_config_warning=bool(get("moe_default_config_warning", False)),
            moe_config_device_name=get("moe_config_device_name"),
            async_scheduling=get("async_scheduling"),
            mtp_detected=bool(get("mtp_detected", False)),
            spec_decode_method=method if spec else None,
            draft_architecture=draft,
            drafter_weights_load_seconds=get("drafter_weights_load_seconds") if spec else None,
            mean_acceptance_length_first=self.spec_first,
            spec_decode_metrics=metrics,
        )


def _mode_from_capture(kinds: set[tuple[str, str]]) -> str:
    """Mode implied by which capture progress bars ran (when no statement names it)."""
    modes = {mode for _kind, mode in kinds}
    if "PIECEWISE" in modes and "FULL" in modes:
        return "FULL_AND_PIECEWISE"
    if ("decode", "FULL") in kinds:
        return "FULL_DECODE_ONLY"
    return "FULL" if "FULL" in modes else "PIECEWISE"


def _tokens_basis(version: str | None) -> str | None:
    """The KV-cache token figure is a pool size up to 0.20, concurrency × max_model_len
    from 0.21 (source builds report 0.1.devN and say nothing)."""
    match = re.match(r"0\.([0-9]+)", version or "")
    if match is None or version is None or version.startswith("0.1.dev"):
        return None
    return "blocks" if int(match.group(1)) <= 20 else "max_concurrency"
