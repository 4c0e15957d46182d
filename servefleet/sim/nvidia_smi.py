#!/usr/bin/env python3
"""Stand-in ``nvidia-smi`` of a simulated node: the real tool's output formats, no GPU.

``sim up`` installs it into each node's ``bin`` folder (first on the PATH of SSH sessions)
and writes the node's readout to ``gpu.json`` in the node's control folder; tests edit that
file to simulate a driver upgrade, a busy GPU, or (by removing it) a driver that is gone.

Answers, in the real tool's formats (compare ``../shared/fixtures/nvml``):

- ``--query-gpu=FIELDS --format=csv[,noheader][,nounits]`` (``-i N`` selects a GPU);
  an unknown field prints ``Field "x" is not a valid field to query.`` and exits 2;
- ``--query-compute-apps=FIELDS --format=…``;
- ``-q`` (the header with ``Driver Version`` / ``CUDA Version``, and the per-GPU facts);
- ``-L`` and the plain summary table.

``gpu.json``::

    {"driver_version": "580.142", "cuda_version": "13.0",
     "gpus": [{"name": "NVIDIA GB10", "uuid": "GPU-…", "pci_bus_id": "0000000F:01:00.0",
               "memory_total_mib": 131072, "memory_free_mib": 130000,   (null: "[N/A]")
               "compute_cap": "12.1", "persistence_mode": true, "mig_mode": null}],
     "processes": [{"gpu_uuid": "GPU-…", "pid": 4242, "process_name": "python3",
                    "used_memory_mib": 1024}]}

Standard library only: it runs with ``python3 -I -S`` on every call.
"""

from __future__ import annotations

import json
import os
import sys
import time

GPU_JSON_ENV = "SERVEFLEET_SIM_GPU_JSON"
NO_DRIVER = ("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. "
             "Make sure that the latest NVIDIA driver is installed and running.\n")
BAD_ARGS = "Invalid combination of input arguments. Please run 'nvidia-smi -h' for help.\n"
KEY_WIDTH = 55
"""``nvidia-smi -q`` pads every key (indent included) to this width before ``: ``."""
NA = "[N/A]"


def _enabled(value: object) -> str:
    if value is None:
        return NA
    if isinstance(value, str):
        return value
    return "Enabled" if value else "Disabled"


def _mib(value: object, units: bool) -> str:
    if value is None:
        return NA
    return f"{value} MiB" if units else str(value)


def _used(gpu: dict) -> int | None:
    total, free = gpu.get("memory_total_mib"), gpu.get("memory_free_mib")
    if total is None or free is None:
        return None
    return int(total) - int(free)


# field name → (header, value(gpu, index, readout, units))
GPU_FIELDS = {
    "index": ("index", lambda g, i, r, u: str(i)),
    "count": ("count", lambda g, i, r, u: str(len(r["gpus"]))),
    "name": ("name", lambda g, i, r, u: g["name"]),
    "gpu_name": ("name", lambda g, i, r, u: g["name"]),
    "uuid": ("uuid", lambda g, i, r, u: g["uuid"]),
    "gpu_uuid": ("uuid", lambda g, i, r, u: g["uuid"]),
    "serial": ("serial", lambda g, i, r, u: NA),
    "driver_version": ("driver_version", lambda g, i, r, u: r["driver_version"]),
    "pci.bus_id": ("pci.bus_id", lambda g, i, r, u: g["pci_bus_id"]),
    "gpu_bus_id": ("pci.bus_id", lambda g, i, r, u: g["pci_bus_id"]),
    "memory.total": ("memory.total [MiB]", lambda g, i, r, u: _mib(g.get("memory_total_mib"), u)),
    "memory.used": ("memory.used [MiB]", lambda g, i, r, u: _mib(_used(g), u)),
    "memory.free": ("memory.free [MiB]", lambda g, i, r, u: _mib(g.get("memory_free_mib"), u)),
    "compute_cap": ("compute_cap", lambda g, i, r, u: g["compute_cap"]),
    "persistence_mode": ("persistence_mode",
                         lambda g, i, r, u: _enabled(g.get("persistence_mode"))),
    "mig.mode.current": ("mig.mode.current", lambda g, i, r, u: _enabled(g.get("mig_mode"))),
    "mig.mode.pending": ("mig.mode.pending", lambda g, i, r, u: _enabled(g.get("mig_mode"))),
    "utilization.gpu": ("utilization.gpu [%]", lambda g, i, r, u: "0" if not u else "0 %"),
    "temperature.gpu": ("temperature.gpu", lambda g, i, r, u: "35"),
}

APP_FIELDS = {
    "gpu_uuid": ("gpu_uuid", lambda p, g, u: p["gpu_uuid"]),
    "gpu_name": ("gpu_name", lambda p, g, u: g["name"] if g else NA),
    "gpu_bus_id": ("gpu_bus_id", lambda p, g, u: g["pci_bus_id"] if g else NA),
    "pid": ("pid", lambda p, g, u: str(p["pid"])),
    "process_name": ("process_name", lambda p, g, u: p["process_name"]),
    "name": ("process_name", lambda p, g, u: p["process_name"]),
    "used_memory": ("used_gpu_memory [MiB]", lambda p, g, u: _mib(p.get("used_memory_mib"), u)),
    "used_gpu_memory": ("used_gpu_memory [MiB]",
                        lambda p, g, u: _mib(p.get("used_memory_mib"), u)),
}


def load_readout(path: str) -> dict | None:
    """The node's ``gpu.json``; None when it is missing (no driver)."""
    try:
        with open(path, encoding="utf-8") as handle:
            readout: dict = json.load(handle)
    except FileNotFoundError:
        return None
    readout.setdefault("processes", [])
    return readout


def _format_options(args: list[str]) -> set[str] | None:
    for index, arg in enumerate(args):
        if arg.startswith("--format="):
            return set(arg.split("=", 1)[1].split(","))
        if arg == "--format" and index + 1 < len(args):
            return set(args[index + 1].split(","))
    return None


def _selected(args: list[str], readout: dict) -> list[tuple[int, dict]]:
    gpus = list(enumerate(readout["gpus"]))
    for index, arg in enumerate(args):
        value = None
        if arg in ("-i", "--id") and index + 1 < len(args):
            value = args[index + 1]
        elif arg.startswith("--id="):
            value = arg.split("=", 1)[1]
        if value is not None:
            wanted = value.split(",")
            gpus = [(i, g) for i, g in gpus
                    if str(i) in wanted or g["uuid"] in wanted or g["pci_bus_id"] in wanted]
    return gpus


def query(kind: str, fields_arg: str, args: list[str], readout: dict) -> tuple[str, int]:
    """``--query-gpu`` / ``--query-compute-apps`` in CSV."""
    options = _format_options(args)
    if options is None or "csv" not in options:
        return BAD_ARGS, 2
    table = GPU_FIELDS if kind == "gpu" else APP_FIELDS
    fields = [f.strip() for f in fields_arg.split(",") if f.strip()]
    for field in fields:
        if field not in table:
            return f'Field "{field}" is not a valid field to query.\n\n', 2
    units = "nounits" not in options
    lines = []
    if "noheader" not in options:
        lines.append(", ".join(table[f][0] for f in fields))
    gpus = _selected(args, readout)
    if kind == "gpu":
        for index, gpu in gpus:
            lines.append(", ".join(GPU_FIELDS[f][1](gpu, index, readout, units) for f in fields))
    else:
        by_uuid = {g["uuid"]: g for _, g in gpus}
        for process in readout["processes"]:
            owner = by_uuid.get(process["gpu_uuid"])
            if owner is not None:
                lines.append(", ".join(APP_FIELDS[f][1](process, owner, units) for f in fields))
    return "".join(line + "\n" for line in lines), 0


def _kv(indent: int, key: str, value: object) -> str:
    return " " * indent + key.ljust(KEY_WIDTH - indent) + ": " + str(value)


def _architecture(name: str, cc: str) -> str:
    major = cc.split(".")[0]
    return {"9": "Hopper", "8": "Ampere", "10": "Blackwell", "12": "Blackwell"}.get(major, "N/A")


def full_query(args: list[str], readout: dict) -> str:
    """``nvidia-smi -q``: the header and the facts a GPU without NVML would still report."""
    gpus = _selected(args, readout)
    out = ["", "==============NVSMI LOG==============", "",
           _kv(0, "Timestamp", time.strftime("%a %b %d %H:%M:%S %Y")),
           _kv(0, "Driver Version", readout["driver_version"]),
           _kv(0, "CUDA Version", readout["cuda_version"]),
           "",
           _kv(0, "Attached GPUs", len(readout["gpus"]))]
    for index, gpu in gpus:
        na = "N/A"
        total = gpu.get("memory_total_mib")
        free = gpu.get("memory_free_mib")
        used = _used(gpu)
        brand = "GeForce" if "GeForce" in gpu["name"] else "NVIDIA"
        out += [
            f"GPU {gpu['pci_bus_id']}",
            _kv(4, "Product Name", gpu["name"]),
            _kv(4, "Product Brand", brand),
            _kv(4, "Product Architecture", _architecture(gpu["name"], gpu["compute_cap"])),
            _kv(4, "Persistence Mode", _enabled(gpu.get("persistence_mode")).strip("[]")),
            "    MIG Mode",
            _kv(8, "Current", _enabled(gpu.get("mig_mode")).strip("[]")),
            _kv(8, "Pending", _enabled(gpu.get("mig_mode")).strip("[]")),
            _kv(4, "Serial Number", na),
            _kv(4, "GPU UUID", gpu["uuid"]),
            _kv(4, "Minor Number", index),
            "    PCI",
            _kv(8, "Bus Id", gpu["pci_bus_id"]),
            "    FB Memory Usage",
            _kv(8, "Total", na if total is None else f"{total} MiB"),
            _kv(8, "Reserved", na if total is None else "0 MiB"),
            _kv(8, "Used", na if used is None else f"{used} MiB"),
            _kv(8, "Free", na if free is None else f"{free} MiB"),
            _kv(4, "Compute Mode", "Default"),
        ]
        processes = [p for p in readout["processes"] if p["gpu_uuid"] == gpu["uuid"]]
        if not processes:
            out.append(_kv(4, "Processes", "None"))
        else:
            out.append("    Processes")
            for process in processes:
                used_mib = process.get("used_memory_mib")
                out += [
                    _kv(8, "GPU instance ID", na),
                    _kv(8, "Compute instance ID", na),
                    _kv(8, "Process ID", process["pid"]),
                    _kv(12, "Type", "C"),
                    _kv(12, "Name", process["process_name"]),
                    _kv(12, "Used GPU Memory", na if used_mib is None else f"{used_mib} MiB"),
                ]
        out.append("")
    return "\n".join(out) + "\n"


def list_gpus(readout: dict) -> str:
    """``nvidia-smi -L``."""
    return "".join(f"GPU {i}: {g['name']} (UUID: {g['uuid']})\n"
                   for i, g in enumerate(readout["gpus"]))


def summary(readout: dict) -> str:
    """Plain ``nvidia-smi``: the summary table (fewer columns than the real one)."""
    width = 89
    rule = "+" + "-" * width + "+"

    def row(text: str) -> str:
        return "|" + text.ljust(width)[:width] + "|"

    out = [time.strftime("%a %b %d %H:%M:%S %Y"), rule,
           row(f" NVIDIA-SMI {readout['driver_version']}            "
               f"Driver Version: {readout['driver_version']}      "
               f"CUDA Version: {readout['cuda_version']}"), rule]
    for index, gpu in enumerate(readout["gpus"]):
        used, total = _used(gpu), gpu.get("memory_total_mib")
        memory = "Not Supported" if used is None else f"{used}MiB / {total}MiB"
        out.append(row(f" {index:>3}  {gpu['name']:<40}{memory:>40}"))
    out += [rule, "", rule, row(" Processes:")]
    if not readout["processes"]:
        out.append(row("  No running processes found"))
    for process in readout["processes"]:
        mem = process.get("used_memory_mib")
        shown = "N/A" if mem is None else f"{mem}MiB"
        out.append(row(f"  {process['pid']:>8}  C  {process['process_name']:<50}{shown:>14}"))
    out.append(rule)
    return "\n".join(out) + "\n"


def main(args: list[str]) -> int:
    """Answer one invocation like nvidia-smi would; returns the exit status."""
    if "-h" in args or "--help" in args:
        sys.stdout.write("NVIDIA System Management Interface (servefleet sim stand-in)\n"
                         "Supported: --query-gpu, --query-compute-apps, -q, -L, -i\n")
        return 0
    path = os.environ.get(GPU_JSON_ENV, "")
    readout = load_readout(path) if path else None
    if readout is None:
        sys.stdout.write(NO_DRIVER)
        return 9
    for arg in args:
        for kind, prefix in (("gpu", "--query-gpu="), ("apps", "--query-compute-apps=")):
            if arg.startswith(prefix):
                text, status = query(kind, arg[len(prefix):], args, readout)
                sys.stdout.write(text)
                return status
    if "--version" in args:
        sys.stdout.write(f"NVIDIA-SMI version  : {readout['driver_version']}\n"
                         f"DRIVER version      : {readout['driver_version']}\n"
                         f"CUDA Version        : {readout['cuda_version']}\n")
        return 0
    if "-q" in args or "--query" in args:
        sys.stdout.write(full_query(args, readout))
        return 0
    if "-L" in args or "--list-gpus" in args:
        sys.stdout.write(list_gpus(readout))
        return 0
    if not [a for a in args if a not in ("-i", "--id") and not a.isdigit()]:
        sys.stdout.write(summary(readout))
        return 0
    sys.stdout.write(BAD_ARGS)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
