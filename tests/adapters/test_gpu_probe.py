"""The GPU probe script: its parsing against the core's, its routes, and real readings.

No GPU here: the NVML route is tested on the shared real reading (and on a stand-in module
for the GB10 "Not Supported" answer), the nvidia-smi route end to end through a stand-in
``nvidia-smi`` that answers with real recorded outputs, and the bare machine for real.
"""

from __future__ import annotations

import ast
import json
import os
import shlex
import shutil
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import pynvml
import pytest

from servefleet.adapters.gpu_probe import probe_script as script
from servefleet.adapters.gpu_probe import probe_script_source, run_probe, run_probe_locally
from servefleet.adapters.node_script import PART_MARKER
from servefleet.core import gpu as core
from servefleet.core.errors import RemoteError
from tests.shared_data import NVML_FIXTURES, shared_missing

REPO = Path(__file__).resolve().parents[2]
RECORDED = Path(__file__).resolve().parent / "data"
SCRIPT = REPO / "servefleet" / "adapters" / "gpu_probe" / "probe_script.py"

GB10_QUERY_GPU = (
    "0, NVIDIA GB10, GPU-5c1e0a52-7f0e-4c1d-9b2a-0e6f3d2a1b4c, 580.142, [N/A], [N/A], 12.1, "
    "Enabled, [N/A]\n"
)
GB10_MEMINFO = "MemTotal:       125506948 kB\nMemAvailable:   100000000 kB\n"
ODD_APPS = "GPU-x, 77, /opt/odd,name/python, [N/A]\nNo running processes found\n"


@pytest.fixture
def nvml_fixtures() -> Path:
    if not NVML_FIXTURES.is_dir():
        shared_missing(f"shared NVML fixtures not found at {NVML_FIXTURES}")
    return NVML_FIXTURES


def recorded(name: str) -> str:
    return (RECORDED / name).read_text()


# --------------------------------------------------------------------------- self-contained


def test_script_imports_only_the_standard_library() -> None:
    # What the node runs: the parts joined (a part's imports of earlier parts stay here).
    tree = ast.parse(probe_script_source(), feature_version=(3, 7))
    imported: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            imported.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            imported.add((node.module or "").split(".")[0])
    assert imported - set(sys.stdlib_module_names) == {"pynvml"}


def test_probe_script_source_is_the_parts_joined() -> None:
    _, marker, body = SCRIPT.read_bytes().partition(f"\n{PART_MARKER}\n".encode())
    assert marker
    first = Path(core.__file__).with_name("probe_parse.py")
    assert probe_script_source() == first.read_bytes() + body


# --------------------------------------------------------------------------- one parser
# The node's probe and the controller parse nvidia-smi with the same code
# (servefleet.core.gpu.probe_parse); the controller's side only types its dicts.


def test_smi_q_header_gives_the_cuda_version(nvml_fixtures: Path) -> None:
    for text in ((nvml_fixtures / "h200-nvidia-smi-q.txt").read_text(),
                 recorded("h200-smi-q-head.txt")):
        assert core.parse_smi_q(text)["cuda_version"] == "13.0"


def test_typed_rows_keep_every_field_the_script_writes() -> None:
    for text in (recorded("h200-smi-query-gpu.csv"), GB10_QUERY_GPU):
        assert script.parse_smi_gpus_csv(text) == [
            row.model_dump() for row in core.parse_smi_gpus_csv(text)]
    apps = recorded("h200-smi-query-apps.csv") + ODD_APPS
    assert len(core.parse_smi_apps_csv(apps)) == 2
    assert core.parse_meminfo(GB10_MEMINFO).mem_total_bytes == \
        script.parse_meminfo(GB10_MEMINFO)["mem_total_bytes"]
    assert [core.cuda_version_from_nvml(v) for v in (13000, 12080, 11040)] == [
        "13.0", "12.8", "11.4"]


@pytest.mark.parametrize(("gpus_csv", "apps_csv"), [
    (recorded("h200-smi-query-gpu.csv"), recorded("h200-smi-query-apps.csv")),
    (GB10_QUERY_GPU, ODD_APPS.replace("GPU-x", "GPU-5c1e0a52-7f0e-4c1d-9b2a-0e6f3d2a1b4c")),
    (GB10_QUERY_GPU, None),
])
def test_smi_route_result_is_a_valid_probe_result(gpus_csv: str, apps_csv: str | None) -> None:
    q_text = recorded("h200-smi-q-head.txt")
    host = script.host_facts("x86_64", GB10_MEMINFO)
    built = script.build_from_smi(gpus_csv, apps_csv, q_text, host, ["pynvml not installed"])
    result = core.result_from_nvidia_smi(gpus_csv, apps_csv, q_text, core.HostFacts(**host),
                                         ["pynvml not installed"])
    assert core.GpuProbeResult.model_validate(built) == result
    assert (result.source, result.cuda_driver_version) == ("nvidia-smi", "13.0")
    assert result.gpus and all(g.uuid for g in result.gpus)


# --------------------------------------------------------------------------- NVML route


def test_nvml_reading_fixture(nvml_fixtures: Path) -> None:
    reading = json.loads((nvml_fixtures / "h200-driver580.json").read_text())
    host = script.host_facts("x86_64", "MemTotal: 1000 kB\nMemAvailable: 500 kB\n")
    result = core.GpuProbeResult.model_validate(
        script.build_from_nvml_reading(reading, host, []))
    assert (result.source, result.driver_version, result.cuda_driver_version) == (
        "nvml", "580.159.04", "13.0")
    assert result.nvml_version == "13.580.159.04"
    (gpu,) = result.gpus
    assert (gpu.name, gpu.uuid, gpu.pci_bus_id, gpu.compute_capability) == (
        "NVIDIA H200", "GPU-1d1b7adb-c4fe-4279-4bee-b1804d9cd8fb", "00000000:00:06.0", "9.0")
    assert (gpu.memory_total_bytes, gpu.memory_free_bytes, gpu.memory_source) == (
        150754820096, 150109880320, "device")
    assert gpu.persistence_mode is True
    assert gpu.mig_mode == core.MigMode(current=False, pending=False)
    assert gpu.processes == ()
    assert result.host.mem_total_bytes == 1024 * 1000


def test_nvml_reading_gb10_not_supported_memory(nvml_fixtures: Path) -> None:
    reading = json.loads((nvml_fixtures / "h200-driver580.json").read_text())
    device = reading["devices"][0]
    device.update(name="NVIDIA GB10", compute_capability=[12, 1], memory=None, mig_mode=None,
                  compute_processes=[{"pid": 4242, "name": "vllm", "used_gpu_memory": None}])
    reading["driver_version"] = "580.142"
    result = core.GpuProbeResult.model_validate(script.build_from_nvml_reading(
        reading, script.host_facts("aarch64", GB10_MEMINFO), []))
    (gpu,) = result.gpus
    assert (gpu.memory_total_bytes, gpu.memory_free_bytes, gpu.memory_source) == (
        None, None, "host")
    assert result.gpu_memory(gpu) == (125506948 * 1024, 100000000 * 1024)
    assert gpu.mig_mode == core.MigMode()
    assert gpu.processes == (core.ProbedProcess(pid=4242, name="vllm"),)
    expected = core.ExpectedGpuFacts(
        gpus=(core.ExpectedGpu(name="NVIDIA GB10", memory_gib=128, unified_memory=True,
                               compute_capability="12.1"),),
        driver_version="580.142", cuda_version="13.0", arch="aarch64")
    assert core.compare_with_inventory(result, expected) == []


class _Gb10Nvml:
    """What pynvml answers on a GB10, as far as the probe asks: the real pynvml error
    classes, memory and MIG queries raising Not Supported. Nothing here imitates a
    component that could run on this machine: there is no NVIDIA driver."""

    NVMLError = pynvml.NVMLError
    NVML_ERROR_NOT_SUPPORTED = pynvml.NVML_ERROR_NOT_SUPPORTED

    class _Proc:
        pid = 4242
        usedGpuMemory = None

    class _Pci:
        busId = b"0000000F:01:00.0"

    @staticmethod
    def _not_supported(*_: object) -> Any:
        raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)

    nvmlDeviceGetMemoryInfo = _not_supported
    nvmlDeviceGetMigMode = _not_supported

    @staticmethod
    def nvmlDeviceGetPersistenceMode(_: object) -> int:
        raise pynvml.NVMLError(pynvml.NVML_ERROR_UNKNOWN)

    nvmlSystemGetDriverVersion = staticmethod(lambda: "580.142")
    nvmlSystemGetCudaDriverVersion = staticmethod(lambda: 13000)
    nvmlSystemGetNVMLVersion = staticmethod(lambda: "13.580.142")
    nvmlDeviceGetCount = staticmethod(lambda: 1)
    nvmlDeviceGetHandleByIndex = staticmethod(lambda i: ("handle", i))
    nvmlDeviceGetName = staticmethod(lambda h: b"NVIDIA GB10")
    nvmlDeviceGetUUID = staticmethod(lambda h: "GPU-5c1e0a52")
    nvmlDeviceGetPciInfo = staticmethod(lambda h: _Gb10Nvml._Pci())
    nvmlDeviceGetCudaComputeCapability = staticmethod(lambda h: (12, 1))
    nvmlDeviceGetComputeRunningProcesses = staticmethod(lambda h: [_Gb10Nvml._Proc()])
    nvmlSystemGetProcessName = staticmethod(lambda pid: "/usr/bin/python3")


def test_read_nvml_survives_not_supported() -> None:
    errors: list[str] = []
    reading = script.read_nvml(_Gb10Nvml, errors)
    device = reading["devices"][0]
    assert (device["memory"], device["mig_mode"], device["persistence_mode"]) == (None, None,
                                                                                  None)
    assert device["name"] == "NVIDIA GB10"
    assert device["pci_bus_id"] == "0000000F:01:00.0"
    assert device["compute_processes"] == [
        {"pid": 4242, "name": "/usr/bin/python3", "used_gpu_memory": None}]
    # Not Supported is an answer; any other NVML error is reported.
    assert errors == ["NVML: GPU 0 persistence mode: Unknown Error"]


# --------------------------------------------------------------------------- real runs here


def _no_gpu_tools() -> None:
    if shutil.which("nvidia-smi") is not None:
        pytest.skip("this machine has nvidia-smi; the no-GPU expectations do not hold")


def test_script_on_this_machine_reports_none() -> None:
    _no_gpu_tools()
    done = subprocess.run([sys.executable, str(SCRIPT)], capture_output=True, timeout=120,
                          check=False)
    assert done.returncode == 0
    result = core.parse_probe_json(done.stdout.decode())
    assert result.source == "none"
    assert result.gpus == ()
    # pynvml is installed here but finds no driver library, so NVML fails to initialise.
    assert result.errors[0].startswith("NVML: ")
    assert "nvidia-smi not found on PATH" in result.errors
    assert "neither NVML (pynvml) nor nvidia-smi answered" in result.errors[-1]
    assert result.host.arch == os.uname().machine
    assert result.host.mem_total_bytes and result.host.mem_total_bytes > 0


def test_run_probe_locally_without_pynvml() -> None:
    _no_gpu_tools()
    result = run_probe_locally(python_args=["-S"])
    assert result.source == "none"
    assert result.errors[0] == "pynvml not installed (package nvidia-ml-py)"


STAND_IN = """#!/bin/sh
# nvidia-smi answering the probe's three invocations with recorded real outputs.
case "$*" in
  "--query-gpu={fields} --format=csv,noheader,nounits") cat {gpus} ;;
  "--query-compute-apps=gpu_uuid,pid,process_name,used_memory --format=csv,noheader,nounits")
    cat {apps} ;;
  "-q") cat {q} ;;
  *) echo "stand-in: unexpected arguments: $*" >&2; exit 2 ;;
esac
"""

FAILING = """#!/bin/sh
echo "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. \
Make sure that the latest NVIDIA driver is installed and running."
exit 9
"""


def _path_with(tmp_path: Path, body: str) -> dict[str, str]:
    tool = tmp_path / "bin" / "nvidia-smi"
    tool.parent.mkdir()
    tool.write_text(body)
    tool.chmod(tool.stat().st_mode | stat.S_IXUSR)
    return {"PATH": f"{tool.parent}:/usr/bin:/bin", "LANG": "C.UTF-8"}


def _smi_env(tmp_path: Path, gpus: Path, apps: Path, q: Path) -> dict[str, str]:
    return _path_with(tmp_path, STAND_IN.format(
        fields=script.SMI_GPU_FIELDS, gpus=shlex.quote(str(gpus)),
        apps=shlex.quote(str(apps)), q=shlex.quote(str(q))))


@pytest.mark.parametrize("python_args", [["-S"], []])
def test_nvidia_smi_route_end_to_end(tmp_path: Path, nvml_fixtures: Path,
                                     python_args: list[str]) -> None:
    gpus, apps = RECORDED / "h200-smi-query-gpu.csv", RECORDED / "h200-smi-query-apps.csv"
    q = nvml_fixtures / "h200-nvidia-smi-q.txt"
    result = run_probe_locally(python_args=python_args, env=_smi_env(tmp_path, gpus, apps, q))
    expected = core.result_from_nvidia_smi(gpus.read_text(), apps.read_text(), q.read_text(),
                                           result.host, result.errors)
    assert result == expected
    assert result.source == "nvidia-smi"
    assert (result.driver_version, result.cuda_driver_version) == ("580.159.04", "13.0")
    assert result.gpus[0].processes[0].pid == 408
    reason = "pynvml not installed" if python_args else "NVML: "
    assert result.errors[0].startswith(reason)


def test_nvidia_smi_route_gb10(tmp_path: Path) -> None:
    (tmp_path / "gpus.csv").write_text(GB10_QUERY_GPU)
    (tmp_path / "apps.csv").write_text("")
    (tmp_path / "q.txt").write_text("Driver Version : 580.142\nCUDA Version : 13.0\n")
    env = _smi_env(tmp_path, tmp_path / "gpus.csv", tmp_path / "apps.csv", tmp_path / "q.txt")
    result = run_probe_locally(python_args=["-S"], env=env)
    (gpu,) = result.gpus
    assert (gpu.name, gpu.compute_capability, gpu.memory_source) == ("NVIDIA GB10", "12.1",
                                                                     "host")
    total, free = result.gpu_memory(gpu)
    assert total is not None and free is not None and total > 0
    assert result.cuda_driver_version == "13.0"


def test_failing_nvidia_smi_is_reported(tmp_path: Path) -> None:
    result = run_probe_locally(python_args=["-S"], env=_path_with(tmp_path, FAILING))
    assert result.source == "none"
    assert result.errors[1].startswith(
        "nvidia-smi --query-gpu=index,name,uuid,driver_version,memory.total,memory.free,"
        "compute_cap,persistence_mode,mig.mode.current failed (exit 9): NVIDIA-SMI has failed")


# --------------------------------------------------------------------------- run_probe


def _through_shell(argv: list[str], stdin: bytes) -> tuple[int, bytes, bytes]:
    """Runs argv as an SSH server does: one command line through the login shell."""
    done = subprocess.run(["/bin/sh", "-c", shlex.join(argv)], input=stdin,
                          capture_output=True, timeout=120, check=False)
    return done.returncode, done.stdout, done.stderr


def test_run_probe_through_a_shell() -> None:
    result = run_probe(lambda argv, stdin: _through_shell([sys.executable, *argv[1:]], stdin))
    assert result.host.arch == os.uname().machine


def test_run_probe_without_python_on_the_node() -> None:
    with pytest.raises(RemoteError, match=r"needs python3-missing on the node.*exit 127"):
        run_probe(_through_shell, node="gb10-a", python="python3-missing")


def test_run_probe_with_garbage_output() -> None:
    with pytest.raises(RemoteError, match="gb10-a: GPU probe printed no valid result"):
        run_probe(_through_shell, node="gb10-a", python="echo")


# --------------------------------------------------------------------------- real GPU readings


def test_recorded_h200_readings_parse_and_agree() -> None:
    nvml = core.parse_probe_json(recorded("h200-probe-nvml.json"))
    smi = core.parse_probe_json(recorded("h200-probe-smi.json"))
    assert (nvml.source, smi.source) == ("nvml", "nvidia-smi")
    assert nvml.errors == ()
    assert smi.errors == ("pynvml not installed (package nvidia-ml-py)",)
    for result in (nvml, smi):
        assert (result.driver_version, result.cuda_driver_version) == ("580.159.04", "13.0")
        assert result.host.arch == "x86_64"
    (a,), (b,) = nvml.gpus, smi.gpus
    same = ("index", "name", "uuid", "compute_capability", "memory_total_bytes",
            "memory_source", "persistence_mode")
    assert {k: getattr(a, k) for k in same} == {k: getattr(b, k) for k in same}
    assert (a.name, a.compute_capability, a.memory_total_bytes) == ("NVIDIA H200", "9.0",
                                                                    150754820096)
    # NVML counts bytes; nvidia-smi rounds to MiB.
    assert a.processes[0].pid == b.processes[0].pid == 408
    assert a.processes[0].used_memory_bytes == 1616904192
    assert b.processes[0].used_memory_bytes == 1542 * core.MIB
    assert a.mig_mode == core.MigMode(current=False, pending=False)
    assert b.mig_mode == core.MigMode(current=False, pending=None)
