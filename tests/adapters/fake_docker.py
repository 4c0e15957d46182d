#!/usr/bin/env python3
"""A stand-in ``docker`` for rollout tests without the fleet: the subset of the CLI that
servefleet's remote scripts call, with its state in a JSON file (``$FAKE_DOCKER_STATE``).

It answers as Docker does where servefleet reads the answer: ``ps`` filtered by the compose
project label or a name (with ``--format``), ``inspect`` (the JSON array, or the formats
``{{.State.StartedAt}}`` and ``{{.Id}}``), ``stop``, ``rm -f``, ``image inspect``, ``pull``,
``logs`` (``--since``, ``--timestamps``), and
``compose -p P --project-directory DIR -f F… (config --images |
up -d [--force-recreate] | build)``. A new ``up`` of a release
recreates the project's container; every start gets a new ``StartedAt``. ``pulls_during_up``
counts images that ``up`` had to pull (the rollout should have pulled them before).
An ``up`` of an unchanged project starts its stopped container again, and the log keeps the
earlier runs, as Docker's does; a running one it leaves alone. Times come from one node
clock (see :func:`tick`), which the fake node's ``date`` reads too.
"""

from __future__ import annotations

import calendar
import json
import os
import re
import sys
import time
from pathlib import Path
from typing import Any

STATE = Path(os.environ["FAKE_DOCKER_STATE"])
PROJECT_LABEL = "com.docker.compose.project"
NODE_EPOCH_NS = 1_795_514_400 * 10**9
"""The node clock's start: 2026-11-24T10:00:00Z."""
BOOT_LOG = "FAKE_DOCKER_BOOT_LOG"
"""A real engine log: each start writes its lines ``$FAKE_DOCKER_BOOT_LINES`` (``a:b``),
each stop its lines ``$FAKE_DOCKER_STOP_LINES``; without it the log stays empty."""


def load() -> dict[str, Any]:
    if STATE.exists():
        return dict(json.loads(STATE.read_text()))
    return {"containers": {}, "images": [], "pulls_during_up": 0, "serial": 0}


def save(state: dict[str, Any]) -> None:
    tmp = STATE.with_suffix(".tmp")
    tmp.write_text(json.dumps(state, indent=1))
    tmp.replace(STATE)


def tick(state: dict[str, Any], step_ns: int = 1_000_000) -> int:
    """The node clock (epoch nanoseconds), ``step_ns`` (a millisecond) further on at each
    reading: what ``date`` prints and what Docker stamps starts and log lines with, so a
    test decides nothing by the speed of the machine it runs on."""
    state["clock_ns"] = state.get("clock_ns", NODE_EPOCH_NS) + step_ns
    return int(state["clock_ns"])


def rfc3339(ns: int) -> str:
    """Docker's RFC 3339 time with nine fraction digits (``logs --timestamps`` pads them)."""
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(ns // 10**9)) + \
        f".{ns % 10**9:09d}Z"


def stamp(state: dict[str, Any]) -> str:
    state["serial"] += 1
    return rfc3339(tick(state))


def since_ns(value: str) -> int:
    """``docker logs --since``: Unix seconds with an optional fraction, or RFC 3339."""
    seconds, _, fraction = value.partition(".")
    if seconds.isdigit():
        return int(seconds) * 10**9 + int(fraction.ljust(9, "0")[:9] or 0)
    stamp_, _, frac = value.rstrip("Z").partition(".")
    whole = calendar.timegm(time.strptime(stamp_, "%Y-%m-%dT%H:%M:%S"))
    return whole * 10**9 + int(frac.ljust(9, "0")[:9] or 0)


def write_log(state: dict[str, Any], c: dict[str, Any], lines: list[str],
              step_ns: int = 1_000_000) -> None:
    """The engine writes ``lines``, ``step_ns`` apart, each stamped by the node clock as
    Docker reads it."""
    for line in lines:
        c.setdefault("log", []).append([tick(state, step_ns), line])


def log_lines(variable: str, part: str) -> list[str]:
    """Lines ``part`` (``start:end``) of the real engine log named by ``$variable``."""
    path = os.environ.get(variable)
    if not path:
        return []
    start, _, end = part.partition(":")
    lines = Path(path).read_bytes().decode("utf-8", "replace").split("\n")
    return lines[int(start or 0):int(end) if end else None]


def logs(state: dict[str, Any], args: list[str]) -> int:
    """``docker logs [--follow] [--since T] [--tail N] [--timestamps] ID``: the container's
    whole log (every run since it was created), lines stamped before ``--since`` left out;
    ``--follow`` ends with the log, as it does once the container stops."""
    c = state["containers"].get(args[-1])
    if c is None:
        print(f"Error: No such container: {args[-1]}", file=sys.stderr)
        return 1
    since = since_ns(args[args.index("--since") + 1]) if "--since" in args else 0
    entries = [(ns, line) for ns, line in c.get("log", []) if ns >= since]
    if "--tail" in args:
        entries = entries[-int(args[args.index("--tail") + 1]):]
    for ns, line in entries:
        print(f"{rfc3339(ns)} {line}" if "--timestamps" in args else line)
    return 0


def date(state: dict[str, Any], args: list[str]) -> int:
    """``date [-u] +%s`` or ``+%s.%N`` from the node clock."""
    ns = tick(state)
    fmt = next((a for a in args if a.startswith("+")), "+%s")
    print(fmt[1:].replace("%s", str(ns // 10**9)).replace("%N", f"{ns % 10**9:09d}"))
    return 0


def name_of(c: dict[str, Any]) -> str:
    """A container's name, as compose names its first engine container."""
    return f"{c['project']}-engine-1"


def filtered(state: dict[str, Any], args: list[str], running_only: bool) -> list[str]:
    """``ps`` filters: ``label=<project label>`` (any project), ``label=<project
    label>=<project>``, ``name=<regular expression>``."""
    project = name = None
    for index, arg in enumerate(args):
        if arg == "--filter":
            key, _, value = args[index + 1].partition("=")
            if key == "label":
                project = value.partition(f"{PROJECT_LABEL}=")[2] or None
            elif key == "name":
                name = value.replace("\\$", "$")
    found = [(c["created"], cid) for cid, c in state["containers"].items()
             if (project is None or c["project"] == project)
             and (name is None or re.search(name, name_of(c)))
             and (not running_only or c["status"] == "running")]
    found.sort(reverse=True)
    if "--latest" in args:
        found = found[:1]
    return [cid for _, cid in found]


def ps_line(fmt: str, cid: str, c: dict[str, Any]) -> str:
    """One ``ps --format`` line: the placeholders servefleet's reader uses."""
    return (fmt.replace("{{.ID}}", cid).replace("{{.Names}}", name_of(c))
            .replace('{{.Label "' + PROJECT_LABEL + '"}}', c["project"]))


def labels_of(c: dict[str, Any]) -> dict[str, str]:
    return {PROJECT_LABEL: c["project"], "com.docker.compose.service": "engine",
            "com.docker.compose.project.working_dir": c["dir"],
            "io.servefleet.release": c["release"]}


def inspect_object(cid: str, c: dict[str, Any]) -> dict[str, Any]:
    """``docker inspect``'s object for a container: the fields servefleet reads."""
    return {
        "Id": cid, "Name": "/" + name_of(c), "Created": f"{c['created']:012d}",
        "RestartCount": c.get("restart_count", 0),
        "State": {"Status": c["status"], "ExitCode": c["exit_code"], "OOMKilled": False,
                  "StartedAt": c["started_at"]},
        "Config": {"Image": c["image"], "Labels": labels_of(c), "Cmd": None, "Env": []},
        "Image": "sha256:" + c["image"].encode().hex()[:64].ljust(64, "0"),
    }


def images_of(files: list[str]) -> list[str]:
    images: list[str] = []
    for name in files:
        for line in Path(name).read_text().splitlines():
            match = re.match(r"^\s+image:\s*(.+?)\s*$", line)
            if match:
                images = [match[1].strip("'\"")]  # the last file that names one wins
    return images


def compose(state: dict[str, Any], args: list[str]) -> int:
    project = args[args.index("-p") + 1]
    folder = args[args.index("--project-directory") + 1]
    files = [args[i + 1] for i, a in enumerate(args) if a == "-f"]
    rest = args[max(i for i, a in enumerate(args) if a == "-f") + 2:]
    images = images_of(files)
    if rest[:2] == ["config", "--images"]:
        print("\n".join(images))
        return 0
    if rest[:1] == ["build"]:
        return 0
    if rest[:2] == ["up", "-d"]:
        release = folder.rstrip("/").rsplit("/", 1)[1]
        for image in images:
            if image not in state["images"]:
                state["images"].append(image)
                state["pulls_during_up"] += 1
        for cid in [cid for cid, c in state["containers"].items() if c["project"] == project]:
            if state["containers"][cid]["release"] != release:
                del state["containers"][cid]
        existing = [c for c in state["containers"].values() if c["project"] == project]
        recreate = "--force-recreate" in rest
        for cid in [cid for cid, c in state["containers"].items()
                    if recreate and c["project"] == project]:
            del state["containers"][cid]
        existing = [c for c in state["containers"].values() if c["project"] == project]
        if existing and existing[0]["status"] == "running":
            # Unchanged and running: compose leaves it be ("Container … Running").
            return 0
        if existing:
            # Unchanged configuration: compose starts the same container again; its log
            # keeps every earlier run.
            container = existing[0]
            container.update(status="running", exit_code=0, started_at=stamp(state))
        else:
            cid = f"c{state['serial'] + 1:011d}"
            container = state["containers"][cid] = {
                "project": project, "release": release, "dir": folder,
                "image": images[0] if images else "unknown", "status": "running",
                "exit_code": 0, "started_at": stamp(state), "created": state["serial"]}
        # A boot takes its time (0.1 s a line here); a shutdown is over within a second.
        write_log(state, container, log_lines(BOOT_LOG, os.environ.get(
            "FAKE_DOCKER_BOOT_LINES", ":0")), step_ns=100_000_000)
        return 0
    print(f"fake docker compose: unsupported {rest}", file=sys.stderr)
    return 2


def inspect(state: dict[str, Any], args: list[str]) -> int:
    """``inspect [--format F] ID|NAME…``: a JSON array, or one line per container for the
    formats ``{{.State.StartedAt}}`` and ``{{.Id}}``."""
    fmt = args[args.index("--format") + 1] if "--format" in args else None
    wanted = [a for i, a in enumerate(args) if a != "--format" and
              (i == 0 or args[i - 1] != "--format")]
    by_name = {name_of(c): cid for cid, c in state["containers"].items()}
    found = []
    for ref in wanted:
        cid = ref if ref in state["containers"] else by_name.get(ref)
        if cid is None:
            print("[]" if fmt is None else "")
            print(f"Error: No such object: {ref}", file=sys.stderr)
            return 1
        found.append((cid, state["containers"][cid]))
    if fmt is None:
        print(json.dumps([inspect_object(cid, c) for cid, c in found]))
        return 0
    for cid, c in found:
        print(c["started_at"] if fmt == "{{.State.StartedAt}}" else cid)
    return 0


def main(argv: list[str]) -> int:
    state = load()
    try:
        return run(state, argv)
    finally:
        save(state)


def run(state: dict[str, Any], argv: list[str]) -> int:
    if argv[:1] == ["version"]:
        print("27.5.1")
        return 0
    if argv[:2] == ["compose", "version"]:
        print("2.32.4")
        return 0
    if argv[:1] == ["logs"]:
        return logs(state, argv[1:])
    if argv[:1] == ["__date"]:
        return date(state, argv[1:])
    if argv[:1] == ["compose"]:
        return compose(state, argv[1:])
    if argv[:1] == ["ps"]:
        ids = filtered(state, argv[1:], running_only="-a" not in argv)
        if "--format" in argv:
            fmt = argv[argv.index("--format") + 1]
            ids = [ps_line(fmt, cid, state["containers"][cid]) for cid in ids]
        if ids:
            print("\n".join(ids))
        return 0
    if argv[:2] == ["image", "inspect"]:
        return 0 if argv[2] in state["images"] else 1
    if argv[:1] == ["pull"]:
        state["images"].append(argv[-1])
        return 0
    if argv[:1] == ["inspect"]:
        return inspect(state, argv[1:])
    if argv[:1] == ["stop"]:
        for cid in [a for a in argv[1:] if a in state["containers"]]:
            if state["containers"][cid]["status"] == "running":
                write_log(state, state["containers"][cid], log_lines(BOOT_LOG, os.environ.get(
                    "FAKE_DOCKER_STOP_LINES", ":0")))
            state["containers"][cid].update(status="exited", exit_code=0)
        return 0
    if argv[:2] == ["rm", "-f"]:
        for cid in argv[2:]:
            state["containers"].pop(cid, None)
        return 0
    print(f"fake docker: unsupported {argv}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
