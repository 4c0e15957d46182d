#!/usr/bin/env python3
"""A stand-in ``docker`` for rollout tests without the fleet: the subset of the CLI that
servefleet's remote scripts call, with its state in a JSON file (``$FAKE_DOCKER_STATE``).

It answers as Docker does where servefleet reads the answer: ``ps`` filtered by the compose
project label, ``inspect`` with a ``--format`` template (the observe template, or
``{{.State.StartedAt}}``), ``stop``, ``image inspect``, ``pull``, and ``compose -p P
--project-directory DIR -f F… (config --images | up -d | build)``. A new ``up`` of a release
recreates the project's container; every start gets a new ``StartedAt``. ``pulls_during_up``
counts images that ``up`` had to pull (the rollout should have pulled them before).
"""

from __future__ import annotations

import json
import os
import re
import sys
import time
from pathlib import Path
from typing import Any

STATE = Path(os.environ["FAKE_DOCKER_STATE"])
PROJECT_LABEL = "com.docker.compose.project"


def load() -> dict[str, Any]:
    if STATE.exists():
        return dict(json.loads(STATE.read_text()))
    return {"containers": {}, "images": [], "pulls_during_up": 0, "serial": 0}


def save(state: dict[str, Any]) -> None:
    tmp = STATE.with_suffix(".tmp")
    tmp.write_text(json.dumps(state, indent=1))
    tmp.replace(STATE)


def stamp(state: dict[str, Any]) -> str:
    state["serial"] += 1
    return f"2026-11-24T10:00:{state['serial']:02d}.{time.time_ns() % 10**9:09d}Z"


def filtered(state: dict[str, Any], args: list[str], running_only: bool) -> list[str]:
    project = None
    for index, arg in enumerate(args):
        if arg == "--filter":
            project = args[index + 1].partition(f"label={PROJECT_LABEL}=")[2]
    found = [(c["created"], cid) for cid, c in state["containers"].items()
             if (project is None or c["project"] == project)
             and (not running_only or c["status"] == "running")]
    found.sort(reverse=True)
    if "--latest" in args:
        found = found[:1]
    return [cid for _, cid in found]


def inspect_line(cid: str, c: dict[str, Any]) -> str:
    return json.dumps({
        "name": f"/{c['project']}-engine-1", "status": c["status"], "exit_code": c["exit_code"],
        "oom_killed": False, "restart_count": c.get("restart_count", 0),
        "started_at": c["started_at"], "image": c["image"],
        "labels": {PROJECT_LABEL: c["project"], "com.docker.compose.service": "engine",
                   "com.docker.compose.project.working_dir": c["dir"],
                   "io.servefleet.release": c["release"]},
        "health": None})


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
        if existing:
            existing[0].update(status="running", exit_code=0, started_at=stamp(state))
        else:
            cid = f"c{state['serial'] + 1:011d}"
            state["containers"][cid] = {
                "project": project, "release": release, "dir": folder,
                "image": images[0] if images else "unknown", "status": "running",
                "exit_code": 0, "started_at": stamp(state), "created": state["serial"]}
        return 0
    print(f"fake docker compose: unsupported {rest}", file=sys.stderr)
    return 2


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
    if argv[:1] == ["compose"]:
        return compose(state, argv[1:])
    if argv[:1] == ["ps"]:
        ids = filtered(state, argv[1:], running_only="-a" not in argv)
        if ids:
            print("\n".join(ids))
        return 0
    if argv[:2] == ["image", "inspect"]:
        return 0 if argv[2] in state["images"] else 1
    if argv[:1] == ["pull"]:
        state["images"].append(argv[-1])
        return 0
    if argv[:1] == ["inspect"]:
        fmt = argv[argv.index("--format") + 1]
        ids = argv[argv.index("--format") + 2:]
        for cid in ids:
            c = state["containers"].get(cid)
            if c is None:
                print(f"Error: No such object: {cid}", file=sys.stderr)
                return 1
            print(c["started_at"] if fmt == "{{.State.StartedAt}}" else inspect_line(cid, c))
        return 0
    if argv[:1] == ["stop"]:
        for cid in [a for a in argv[1:] if a in state["containers"]]:
            state["containers"][cid].update(status="exited", exit_code=0)
        return 0
    print(f"fake docker: unsupported {argv}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
