"""GPU probe results: parsing, comparison with the inventory, deploy preflight."""

from __future__ import annotations

from pathlib import Path

import pytest

from servefleet.core.gpu import (
    GIB,
    MIB,
    ExpectedGpu,
    ExpectedGpuFacts,
    GpuProbeResult,
    HostFacts,
    ProbedGpu,
    ProbedProcess,
    compare_with_inventory,
    cuda_version_from_nvml,
    foreign_processes,
    free_memory_check,
    gpu_name_matches,
    parse_meminfo,
    parse_probe_json,
    parse_smi_apps_csv,
    parse_smi_gpus_csv,
    parse_smi_q,
    result_from_nvidia_smi,
    smi_value,
    version_matches,
)
from tests.shared_data import NVML_FIXTURES, shared_missing

REPO = Path(__file__).resolve().parents[2]
RECORDED = REPO / "tests" / "adapters" / "data"

# nvidia-smi's format for a GB10 (unified memory): memory columns answer [N/A].
GB10_QUERY_GPU = (
    "0, NVIDIA GB10, GPU-5c1e0a52-7f0e-4c1d-9b2a-0e6f3d2a1b4c, 580.142, [N/A], [N/A], 12.1, "
    "Enabled, [N/A]\n"
)
# 123 GB of MemTotal: what a 128 GB LPDDR5x pool leaves to Linux.
GB10_MEMINFO = "MemTotal:       125506948 kB\nMemFree:         2000000 kB\n" \
               "MemAvailable:   100000000 kB\n"
RTX5090_QUERY_GPU = (
    "0, NVIDIA GeForce RTX 5090, GPU-0b7f6c2e-1111-2222-3333-444455556666, 580.126.09, "
    "32607, 32111, 12.0, Disabled, [N/A]\n"
)


@pytest.fixture
def nvml_fixtures() -> Path:
    if not NVML_FIXTURES.is_dir():
        shared_missing(f"shared NVML fixtures not found at {NVML_FIXTURES}")
    return NVML_FIXTURES


def recorded_h200() -> GpuProbeResult:
    return parse_probe_json((RECORDED / "h200-probe-nvml.json").read_text())


def gb10_result() -> GpuProbeResult:
    host = parse_meminfo(GB10_MEMINFO).model_copy(update={"arch": "aarch64"})
    return result_from_nvidia_smi(GB10_QUERY_GPU, "", "CUDA Version : 13.0\n", host)


def h200_expected(**changes: object) -> ExpectedGpuFacts:
    gpu = {"name": "NVIDIA H200", "count": 1, "memory_gib": 141, "compute_capability": "9.0"}
    gpu.update({k[4:]: v for k, v in changes.items() if k.startswith("gpu_")})
    facts: dict[str, object] = {"driver_version": "580.159", "cuda_version": "13.0",
                                "arch": "x86_64"}
    facts.update({k: v for k, v in changes.items() if not k.startswith("gpu_")})
    return ExpectedGpuFacts.model_validate({**facts, "gpus": [gpu]})


# --------------------------------------------------------------------------- parsing


@pytest.mark.parametrize("raw", ["N/A", "[N/A]", "[Not Supported]", " [Unknown Error] ", ""])
def test_smi_placeholders_are_null(raw: str) -> None:
    assert smi_value(raw) is None


def test_nvidia_smi_q_fixture_header(nvml_fixtures: Path) -> None:
    header = parse_smi_q((nvml_fixtures / "h200-nvidia-smi-q.txt").read_text())
    assert header == {"driver_version": "580.159.04", "cuda_version": "13.0"}


def test_nvidia_smi_q_ignores_indented_sections_and_na() -> None:
    text = "Driver Version : 580.142\nCUDA Version : N/A\n    CUDA Version : 12.0\n"
    assert parse_smi_q(text) == {"driver_version": "580.142", "cuda_version": None}


def test_recorded_query_gpu_agrees_with_nvml_reading() -> None:
    (row,) = parse_smi_gpus_csv((RECORDED / "h200-smi-query-gpu.csv").read_text())
    nvml = recorded_h200().gpus[0]
    assert row.name == nvml.name == "NVIDIA H200"
    assert row.uuid == nvml.uuid
    # nvidia-smi says 143771 MiB; NVML says the same figure in bytes.
    assert row.memory_total_bytes == nvml.memory_total_bytes == 143771 * MIB
    assert row.compute_capability == "9.0"
    assert row.persistence_mode is True
    assert row.mig_current is False
    assert row.driver_version == "580.159.04"


def test_gb10_query_gpu_has_no_memory() -> None:
    (row,) = parse_smi_gpus_csv(GB10_QUERY_GPU)
    assert (row.memory_total_bytes, row.memory_free_bytes, row.mig_current) == (None, None, None)
    assert row.compute_capability == "12.1"


def test_query_gpu_rejects_short_lines() -> None:
    with pytest.raises(ValueError, match="unexpected nvidia-smi"):
        parse_smi_gpus_csv("0, NVIDIA H200, GPU-1\n")


def test_compute_apps_parsing() -> None:
    text = (
        (RECORDED / "h200-smi-query-apps.csv").read_text()
        + "GPU-x, 77, /opt/odd,name/python, [N/A]\nNo running processes found\n"
    )
    recorded, odd = parse_smi_apps_csv(text)
    assert (recorded.pid, recorded.name, recorded.used_memory_bytes) == (408, "python3",
                                                                         1542 * MIB)
    assert (odd.gpu_uuid, odd.name, odd.used_memory_bytes) == ("GPU-x", "/opt/odd,name/python",
                                                               None)


def test_meminfo_and_cuda_version() -> None:
    host = parse_meminfo(GB10_MEMINFO)
    assert host.mem_total_bytes == 125506948 * 1024
    assert host.mem_available_bytes == 100000000 * 1024
    assert [cuda_version_from_nvml(v) for v in (13000, 12080, 12020)] == ["13.0", "12.8", "12.2"]


def test_gb10_result_takes_memory_from_host() -> None:
    result = gb10_result()
    gpu = result.gpus[0]
    assert gpu.memory_source == "host"
    assert result.gpu_memory(gpu) == (125506948 * 1024, 100000000 * 1024)


def test_probe_json_is_validated() -> None:
    assert recorded_h200().source == "nvml"
    with pytest.raises(ValueError, match="not a probe result"):
        parse_probe_json("Traceback (most recent call last):")
    with pytest.raises(ValueError, match="not a probe result"):
        parse_probe_json('{"source": "nvml", "surprise": 1}')
    with pytest.raises(ValueError):
        parse_probe_json("")


# --------------------------------------------------------------------------- comparison


def test_recorded_h200_matches_its_inventory() -> None:
    assert compare_with_inventory(recorded_h200(), h200_expected()) == []


@pytest.mark.parametrize(("expected", "observed", "match"), [
    ("580.142", "580.142", True),
    ("580.142", "580.142.07", True),
    ("580", "580.159.04", True),
    ("580.126.09", "580.142", False),
    ("580.14", "580.142", False),
    ("580.142.07", "580.142", False),
    ("13", "13.0", True),
])
def test_version_matching_is_by_whole_parts(expected: str, observed: str, match: bool) -> None:
    assert version_matches(expected, observed) is match


@pytest.mark.parametrize(("expected", "observed", "match"), [
    ("NVIDIA H200", "NVIDIA H200", True),
    ("NVIDIA H100", "NVIDIA H100 80GB HBM3", True),
    ("RTX 5090", "NVIDIA GeForce RTX 5090", True),
    ("rtx 5090", "NVIDIA GeForce RTX 5090", True),
    ("RTX 509", "NVIDIA GeForce RTX 5090", False),
    ("NVIDIA GB10", "NVIDIA H200", False),
])
def test_gpu_name_matching(expected: str, observed: str, match: bool) -> None:
    assert gpu_name_matches(expected, observed) is match


def test_driver_upgrade_is_an_error_naming_both_versions() -> None:
    (mismatch,) = compare_with_inventory(recorded_h200(), h200_expected(driver_version="580.142"))
    assert (mismatch.field, mismatch.expected, mismatch.observed, mismatch.severity) == (
        "driver_version", "580.142", "580.159.04", "error")
    assert "580.159.04" in mismatch.message


def test_cuda_and_arch_mismatch() -> None:
    found = compare_with_inventory(recorded_h200(), h200_expected(cuda_version="12.8",
                                                                  arch="aarch64"))
    assert {(m.field, m.observed) for m in found} == {("cuda_version", "13.0"),
                                                      ("arch", "x86_64")}


def test_arch_aliases() -> None:
    assert compare_with_inventory(recorded_h200(), h200_expected(arch="amd64")) == []


@pytest.mark.parametrize(("memory_gib", "ok"), [(141, True), (140, True), (144, True),
                                                (150, False), (128, False)])
def test_h200_memory_tolerance(memory_gib: float, ok: bool) -> None:
    found = compare_with_inventory(recorded_h200(), h200_expected(gpu_memory_gib=memory_gib))
    assert (found == []) is ok
    if not ok:
        assert found[0].field == "gpus[0].memory_gib"
        assert found[0].observed == "140.4"


def test_rtx5090_reads_a_little_under_32_gib() -> None:
    result = result_from_nvidia_smi(RTX5090_QUERY_GPU, "", None, HostFacts(arch="x86_64"))
    expected = ExpectedGpuFacts(
        gpus=(ExpectedGpu(name="NVIDIA GeForce RTX 5090", memory_gib=32,
                          compute_capability="12.0"),),
        driver_version="580.126.09", arch="x86_64")
    assert compare_with_inventory(result, expected) == []
    assert result.gpus[0].memory_total_bytes is not None
    assert round(result.gpus[0].memory_total_bytes / GIB, 1) == 31.8


def test_count_capability_and_unexpected_gpus() -> None:
    result = recorded_h200()
    two = compare_with_inventory(result, h200_expected(gpu_count=2))
    assert [(m.field, m.expected, m.observed) for m in two] == [("gpus[0].count", "2", "1")]
    cc = compare_with_inventory(result, h200_expected(gpu_compute_capability="9.1"))
    assert [(m.field, m.observed) for m in cc] == [("gpus[0].compute_capability", "9.0")]
    other = compare_with_inventory(result, h200_expected(gpu_name="NVIDIA H100"))
    assert {m.field for m in other} == {"gpus[0].count", "gpus"}
    assert all(m.severity == "error" for m in other)


def test_gb10_unified_memory_compares_host_pool() -> None:
    expected = ExpectedGpuFacts(
        gpus=(ExpectedGpu(name="NVIDIA GB10", memory_gib=128, unified_memory=True,
                          compute_capability="12.1"),),
        driver_version="580.142", cuda_version="13.0", arch="aarch64")
    assert compare_with_inventory(gb10_result(), expected) == []
    small = expected.model_copy(update={"gpus": (expected.gpus[0].model_copy(
        update={"memory_gib": 256}),)})
    (mismatch,) = compare_with_inventory(gb10_result(), small)
    assert mismatch.field == "gpus[0].memory_gib"
    assert "host MemTotal" in mismatch.message


def test_gpu_without_memory_listed_as_discrete_is_a_warning() -> None:
    expected = ExpectedGpuFacts(gpus=(ExpectedGpu(name="NVIDIA GB10", memory_gib=119,
                                                  compute_capability="12.1"),))
    found = compare_with_inventory(gb10_result(), expected)
    assert [(m.field, m.severity) for m in found] == [
        ("gpus[0].unified_memory", "warning"), ("gpus[0].memory_gib", "warning")]


def test_no_source_is_one_error_with_the_reasons() -> None:
    result = GpuProbeResult(source="none", host=HostFacts(arch="x86_64"),
                            errors=("pynvml not installed", "nvidia-smi not found on PATH"))
    (mismatch,) = compare_with_inventory(result, h200_expected())
    assert mismatch.field == "gpus"
    assert "nvidia-smi not found on PATH" in mismatch.message


def test_unreadable_versions_are_warnings() -> None:
    result = recorded_h200().model_copy(update={"cuda_driver_version": None})
    (mismatch,) = compare_with_inventory(result, h200_expected())
    assert (mismatch.field, mismatch.severity, mismatch.observed) == ("cuda_version", "warning",
                                                                       None)


# --------------------------------------------------------------------------- preflight


def test_free_memory_check_on_recorded_h200() -> None:
    result = recorded_h200()  # 138.3 GiB free of 140.4 GiB; pid 408 holds 1.5 GiB
    assert free_memory_check(result, 0.9, unified=False) is None
    message = free_memory_check(result, 0.99, unified=False)
    assert message is not None
    assert "GPU 0 (NVIDIA H200): 138.3 GiB free of 140.4 GiB" in message
    # The memory of the engine the rollout stops first counts as free.
    assert free_memory_check(result, 0.99, unified=False, ignore_pids={408}) is None


def test_free_memory_check_on_unified_memory_uses_host_available() -> None:
    result = gb10_result()  # 95.4 GiB available of 119.7 GiB
    assert free_memory_check(result, 0.75, unified=True) is None
    message = free_memory_check(result, 0.85, unified=True)
    assert message is not None and message.startswith("unified memory: 95.4 GiB available")


def test_free_memory_check_without_readings() -> None:
    none = GpuProbeResult(source="none", errors=("nvidia-smi not found on PATH",))
    assert "nvidia-smi not found" in (free_memory_check(none, 0.9, unified=False) or "")
    with pytest.raises(ValueError):
        free_memory_check(recorded_h200(), 1.5, unified=False)


def test_foreign_processes_are_warnings() -> None:
    (warning,) = foreign_processes(recorded_h200())
    assert warning.severity == "warning"
    assert "pid 408 (python3, 1.5 GiB)" in warning.message
    assert foreign_processes(recorded_h200(), own_pids={408}) == []
    gpu = ProbedGpu(index=1, name="NVIDIA GB10", memory_source="host",
                    processes=(ProbedProcess(pid=9),))
    (unknown,) = foreign_processes(GpuProbeResult(source="nvml", gpus=(gpu,)))
    assert "pid 9 (unknown)" in unknown.message


def test_unified_gpu_that_reports_its_own_pool_is_compared_on_it() -> None:
    # A unified-memory device whose driver does report memory: its own figure is the pool,
    # whatever the host's /proc/meminfo says (only "Not Supported" sends us to the host).
    host = parse_meminfo("MemTotal: 24000000 kB\nMemAvailable: 20000000 kB\n")
    row = "0, NVIDIA GB10, GPU-1, 580.142, 131072, 120000, 12.1, Enabled, [N/A]\n"
    result = result_from_nvidia_smi(row, "", "CUDA Version : 13.0\n",
                                    host.model_copy(update={"arch": "aarch64"}))
    expected = ExpectedGpuFacts(
        gpus=(ExpectedGpu(name="NVIDIA GB10", memory_gib=128, unified_memory=True,
                          compute_capability="12.1"),),
        driver_version="580.142", cuda_version="13.0", arch="aarch64")
    assert compare_with_inventory(result, expected) == []
    assert free_memory_check(result, 0.45, unified=True) is None
    message = free_memory_check(result, 0.95, unified=True)
    assert message is not None and "117.2 GiB available of 128.0 GiB" in message


def test_the_memory_cuda_reports_is_held_against_cuda_memory_gib() -> None:
    from servefleet.core.gpu import CudaMemory

    # A GB10 as CUDA sees it: 121.69 GiB total (NVML answers "Not Supported" there).
    result = gb10_result().model_copy(update={"cuda_memory": (
        CudaMemory(index=0, total_bytes=int(121.69 * GIB), free_bytes=int(101.5 * GIB)),)})
    unset = ExpectedGpuFacts(gpus=(ExpectedGpu(name="NVIDIA GB10", memory_gib=128,
                                               unified_memory=True,
                                               compute_capability="12.1"),))
    (mismatch,) = compare_with_inventory(result, unset)
    assert (mismatch.field, mismatch.severity, mismatch.observed) == (
        "gpus[0].cuda_memory_gib", "warning", "121.69")
    assert mismatch.message == (
        "GPU 0 (NVIDIA GB10): CUDA reports 121.69 GiB of its 128 GiB, which vLLM multiplies "
        "by gpu_memory_utilization; set cuda_memory_gib: 121.69 (and memory_source) so plans "
        "and rules size against it")
    matching = unset.model_copy(update={"gpus": (unset.gpus[0].model_copy(
        update={"cuda_memory_gib": 121.69}),)})
    assert compare_with_inventory(result, matching) == []
    stale = unset.model_copy(update={"gpus": (unset.gpus[0].model_copy(
        update={"cuda_memory_gib": 119.0}),)})
    (mismatch,) = compare_with_inventory(result, stale)
    assert "CUDA reports 121.69 GiB, the inventory says 119" in mismatch.message
    # a probe that did not read CUDA (a rollout's preflight) says nothing about it
    assert compare_with_inventory(gb10_result(), stale) == []


def test_the_probe_script_says_why_cuda_memory_was_not_read() -> None:
    from servefleet.adapters.gpu_probe import run_probe_locally

    result = run_probe_locally(python_args=["-S"], env={"PATH": "/nonexistent",
                                                        "LD_LIBRARY_PATH": "/nonexistent"},
                               cuda=True)
    if result.cuda_memory is not None:
        pytest.skip("this machine has a CUDA driver")
    assert any(e.startswith("CUDA memory not read: libcuda.so.1 not loadable")
               for e in result.errors)


def test_the_recorded_h100_cuda_reading_is_what_vllm_sized_against() -> None:
    result = parse_probe_json((RECORDED / "h100-probe-cuda.json").read_text())
    assert result.cuda_memory is not None
    (reading,) = result.cuda_memory
    # vLLM 0.26.0 on an H100: "Free memory on device (78.66/79.18 GiB) on startup"
    assert round(reading.total_bytes / GIB, 2) == 79.18
    assert round((result.gpus[0].memory_total_bytes or 0) / GIB, 2) == 79.65  # NVML's
    expected = ExpectedGpuFacts(gpus=(ExpectedGpu(name="NVIDIA H100", memory_gib=80,
                                                  compute_capability="9.0"),))
    (mismatch,) = compare_with_inventory(result, expected)
    assert "set cuda_memory_gib: 79.18" in mismatch.message
