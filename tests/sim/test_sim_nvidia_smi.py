"""The stand-in nvidia-smi against real nvidia-smi outputs of the same GPU.

The readout is built from the real H200 reading the adapter tests recorded, so the stand-in's
CSV must equal the recorded CSV byte for byte, and its ``-q`` header the real header.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from servefleet.adapters.gpu_probe import probe_script
from servefleet.core import gpu as core_gpu
from servefleet.sim import inventory, nvidia_smi
from servefleet.sim.spec import reference_fleet

SCRIPT = Path(nvidia_smi.__file__)
RECORDED = Path(__file__).resolve().parents[1] / "adapters" / "data"
QUERY_GPU = ("--query-gpu=index,name,uuid,driver_version,memory.total,memory.free,compute_cap,"
             "persistence_mode,mig.mode.current")
QUERY_APPS = "--query-compute-apps=gpu_uuid,pid,process_name,used_memory"
CSV = "--format=csv,noheader,nounits"

# The H200 of tests/adapters/data (driver 580.159.04), as a gpu.json.
H200: dict[str, Any] = {
    "driver_version": "580.159.04",
    "cuda_version": "13.0",
    "gpus": [{
        "name": "NVIDIA H200",
        "uuid": "GPU-638d0cac-8295-61b5-4e9a-ffe107534a7b",
        "pci_bus_id": "00000000:00:06.0",
        "memory_total_mib": 143771,
        "memory_free_mib": 141606,
        "compute_cap": "9.0",
        "persistence_mode": True,
        "mig_mode": "Disabled",
    }],
    "processes": [{"gpu_uuid": "GPU-638d0cac-8295-61b5-4e9a-ffe107534a7b", "pid": 408,
                   "process_name": "python3", "used_memory_mib": 1542}],
}


def smi(readout: dict[str, Any] | None, tmp_path: Path,
        *args: str) -> subprocess.CompletedProcess[str]:
    path = tmp_path / "gpu.json"
    if readout is not None:
        path.write_text(json.dumps(readout))
    return subprocess.run([sys.executable, "-I", "-S", str(SCRIPT), *args], capture_output=True,
                          text=True, check=False,
                          env={nvidia_smi.GPU_JSON_ENV: str(path), "PATH": "/usr/bin:/bin"})


@pytest.fixture
def recorded() -> Path:
    # In the repository: a missing file is a broken checkout, not a machine without it.
    assert (RECORDED / "h200-smi-query-gpu.csv").is_file(), f"no recorded outputs in {RECORDED}"
    return RECORDED


def test_query_gpu_equals_the_real_output(tmp_path: Path, recorded: Path) -> None:
    out = smi(H200, tmp_path, QUERY_GPU, CSV)
    assert out.returncode == 0, out.stdout
    assert out.stdout == (recorded / "h200-smi-query-gpu.csv").read_text()


def test_query_compute_apps_equals_the_real_output(tmp_path: Path, recorded: Path) -> None:
    out = smi(H200, tmp_path, QUERY_APPS, CSV)
    assert out.returncode == 0
    assert out.stdout == (recorded / "h200-smi-query-apps.csv").read_text()


def test_q_header_has_the_real_layout(tmp_path: Path, recorded: Path) -> None:
    out = smi(H200, tmp_path, "-q")
    assert out.returncode == 0
    real = (recorded / "h200-smi-q-head.txt").read_text().splitlines()
    ours = out.stdout.splitlines()[:len(real)]
    # The timestamp differs; every other header line is the same, padding included.
    assert [line for line in ours if not line.startswith("Timestamp")] == \
        [line for line in real if not line.startswith("Timestamp")]
    assert ours[3].startswith("Timestamp" + " " * 46 + ": ")


def test_q_per_gpu_lines_match_the_real_full_output(tmp_path: Path, shared_dir: Path) -> None:
    real = (shared_dir / "fixtures" / "nvml" / "h200-nvidia-smi-q.txt").read_text().splitlines()
    readout = json.loads(json.dumps(H200))
    readout["gpus"][0].update(uuid="GPU-1d1b7adb-c4fe-4279-4bee-b1804d9cd8fb",
                              memory_free_mib=143156)
    readout["driver_version"] = "580.159.04"
    readout["processes"] = []
    ours = smi(readout, tmp_path, "-q").stdout.splitlines()
    for line in ("GPU 00000000:00:06.0",
                 "    Product Name                                       : NVIDIA H200",
                 "    Persistence Mode                                   : Enabled",
                 "        Current                                        : Disabled",
                 "    GPU UUID                                           : "
                 "GPU-1d1b7adb-c4fe-4279-4bee-b1804d9cd8fb",
                 "        Bus Id                                         : 00000000:00:06.0",
                 "        Total                                          : 143771 MiB",
                 "        Free                                           : 143156 MiB",
                 "    Processes                                          : None"):
        assert line in real, line
        assert line in ours, line


def test_probe_parsers_read_the_stand_in(tmp_path: Path) -> None:
    # The GPU probe (both its node-side script and the core twin) must understand what a
    # simulated node prints, GB10's unsupported memory included.
    spec = reference_fleet()[0]
    readout = inventory.gpu_readout(spec)
    readout["gpus"][0].update(memory_total_mib=None, memory_free_mib=None)
    gpus_csv = smi(readout, tmp_path, *probe_script.SMI_QUERY_GPU[1:]).stdout
    q_text = smi(readout, tmp_path, "-q").stdout
    rows = probe_script.parse_smi_gpus_csv(gpus_csv)
    assert rows[0]["name"] == "NVIDIA GB10"
    assert rows[0]["compute_capability"] == "12.1"
    assert rows[0]["memory_total_bytes"] is None
    assert rows[0]["mig_current"] is None
    assert probe_script.parse_smi_q(q_text) == core_gpu.parse_smi_q(q_text)
    assert core_gpu.parse_smi_q(q_text)["cuda_version"] == "13.0"
    assert probe_script.parse_smi_apps_csv(
        smi(readout, tmp_path, *probe_script.SMI_QUERY_APPS[1:]).stdout) == []


def test_units_and_header(tmp_path: Path) -> None:
    out = smi(H200, tmp_path, "--query-gpu=index,memory.total,memory.used", "--format=csv")
    assert out.stdout == "index, memory.total [MiB], memory.used [MiB]\n0, 143771 MiB, 2165 MiB\n"


def test_unknown_field_is_refused_like_the_real_tool(tmp_path: Path) -> None:
    out = smi(H200, tmp_path, "--query-gpu=index,cuda_version", CSV)
    assert out.returncode == 2
    assert out.stdout == 'Field "cuda_version" is not a valid field to query.\n\n'


def test_driver_upgrade_is_seen(tmp_path: Path) -> None:
    readout = json.loads(json.dumps(H200))
    readout["driver_version"] = "590.44.01"
    out = smi(readout, tmp_path, "--query-gpu=driver_version", CSV)
    assert out.stdout == "590.44.01\n"
    assert "Driver Version                                         : 590.44.01" in \
        smi(readout, tmp_path, "-q").stdout


def test_missing_readout_is_a_missing_driver(tmp_path: Path) -> None:
    out = smi(None, tmp_path, "-q")
    assert out.returncode == 9
    assert out.stdout.startswith("NVIDIA-SMI has failed because it couldn't communicate")


def test_list_and_select(tmp_path: Path) -> None:
    readout = json.loads(json.dumps(H200))
    second = dict(readout["gpus"][0], uuid="GPU-00000000-0000-0000-0000-000000000001",
                  pci_bus_id="00000000:00:07.0")
    readout["gpus"].append(second)
    assert smi(readout, tmp_path, "-L").stdout == (
        "GPU 0: NVIDIA H200 (UUID: GPU-638d0cac-8295-61b5-4e9a-ffe107534a7b)\n"
        "GPU 1: NVIDIA H200 (UUID: GPU-00000000-0000-0000-0000-000000000001)\n")
    assert smi(readout, tmp_path, "-i", "1", "--query-gpu=index,pci.bus_id", CSV).stdout == \
        "1, 00000000:00:07.0\n"
