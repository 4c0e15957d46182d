"""Run benchmark scenarios on a node and keep their records there.

The load generator is vLLM's own ``vllm bench serve``, run by the small program
:mod:`~servefleet.adapters.bench.load`, sent on standard input: inside the running engine's
container (``docker exec``) when its image has it, else in a vLLM image beside it on the
same node (:mod:`servefleet.core.bench.beside`). Either way its requests never cross the
network. One command per scenario and seed; its lines are followed as they come. Each
result is appended at once to ``<deployment>/bench.jsonl`` on the node, so an interrupted
bench keeps the runs that finished.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from importlib import resources
from typing import Any

from servefleet.adapters import compose_commands, remote
from servefleet.adapters.runtime import Transport
from servefleet.core.bench.beside import BENCH_SERVICE, BENCH_SERVICE_FILE, bench_service_file
from servefleet.core.bench.record import BENCH_FILE, BenchRecord, parse_records
from servefleet.core.bench.scenario import Scenario
from servefleet.core.errors import RemoteError

RESULT = "@@bench-result "
ERROR = "@@bench-error "
ALIVE = "@@bench-alive "
IMAGE = "@@bench-image "
EXIT = "@@bench-exit "
RECORD_TIMEOUT_SECONDS = 30
NO_ENGINE_EXIT = 4

# $1 compose project: the running engine's container in $c, and its image id printed first
# (what a run measures); without one, the no-engine exit.
_FIND_ENGINE = (
    'c=$(' + remote.deployment_ids('"$1"', running=True) + ') || exit 1; '
    'c=$(echo "$c" | head -n 1); '
    '[ -n "$c" ] || { echo "' + EXIT + str(NO_ENGINE_EXIT) + '"; exit 0; }; '
    "printf '" + IMAGE + "%s\\n' \"$(docker inspect --format '{{.Image}}' \"$c\")\"; "
)
# $1 compose project, $2 the load program, $3 its JSON job. The image id first, then the
# program's lines, then its exit status.
RUN_SCRIPT = (
    _FIND_ENGINE +
    'printf "%s" "$2" | docker exec -i "$c" python3 - "$3" 2>&1; echo "' + EXIT + '$?"'
)
# $1 compose project, $2 the load program, $3 its JSON job, $4 the bench service's compose
# file and $5 where it goes, $6 the load container's name, then the compose command without
# its subcommand (the bench file among the release's, before the node's overrides, which
# may change it). The engine's image id first (what is measured), as above.
RUN_BESIDE_SCRIPT = (
    _FIND_ENGINE +
    'program=$2; job=$3; name=$6; printf "%s" "$4" > "$5" || exit 1; shift 6; '
    # A load container left by a controller that died goes first, and this one at the end.
    'docker rm -f "$name" >/dev/null 2>&1; '
    "trap 'docker rm -f \"$name\" >/dev/null 2>&1' EXIT; "
    'if docker compose version >/dev/null 2>&1; then set -- docker compose "$@"; '
    'else set -- docker-compose "$@"; fi; '
    'printf "%s" "$program" | "$@" --profile ' + BENCH_SERVICE + ' run --rm -T --no-deps '
    '--name "$name" ' + BENCH_SERVICE + ' "$job" 2>&1; echo "' + EXIT + '$?"'
)
APPEND_SCRIPT = "printf '%s\\n' \"$2\" >> \"$1/" + BENCH_FILE + "\""
READ_SCRIPT = 'cat "$1/' + BENCH_FILE + '" 2>/dev/null; true'


def load_program() -> str:
    """The program run in the engine's container."""
    return resources.files(__name__).joinpath("load.py").read_text()


def run_command(deployment: str, job: dict[str, Any]) -> list[str]:
    """The node command that runs one scenario with one seed (see :data:`RUN_SCRIPT`)."""
    return ["sh", "-c", RUN_SCRIPT, "sh", remote.compose_project(deployment), load_program(),
            json.dumps(job, separators=(",", ":"))]


def load_container(deployment: str) -> str:
    """The name of the load container run beside ``deployment``'s engine."""
    return f"servefleet-bench-{deployment}"


def run_beside_command(base_dir: str, deployment: str, release_id: str,
                       compose_files: Sequence[str], image: str, hf_cache: str,
                       job: dict[str, Any]) -> list[str]:
    """The node command that runs one scenario with one seed in a vLLM image beside the
    engine (see :data:`RUN_BESIDE_SCRIPT`): the release's compose files with the ``bench``
    service's (``<deployment>/bench-service.json``, outside the release) added."""
    name = load_container(deployment)
    service_file = f"{remote.deployment_dir(base_dir, deployment)}/{BENCH_SERVICE_FILE}"
    files = [*compose_files[:1], service_file, *compose_files[1:]]
    return ["sh", "-c", RUN_BESIDE_SCRIPT, "sh", remote.compose_project(deployment),
            load_program(), json.dumps(job, separators=(",", ":")),
            bench_service_file(image, hf_cache), service_file, name,
            *compose_commands.compose((), base_dir, deployment, release_id, files,
                                      project=name)]


def append_command(base_dir: str, deployment: str, record: BenchRecord) -> list[str]:
    """Append one record to the deployment's ``bench.jsonl``."""
    return ["sh", "-c", APPEND_SCRIPT, "sh", remote.deployment_dir(base_dir, deployment),
            record.to_line()]


def read_command(base_dir: str, deployment: str) -> list[str]:
    """Read the deployment's ``bench.jsonl`` (nothing when it has none)."""
    return ["sh", "-c", READ_SCRIPT, "sh", remote.deployment_dir(base_dir, deployment)]


def job_for(scenario: Scenario, seed: int, *, port: int, kv_gauges: Iterable[str],
            texts: bool = False, tokenizer: str | None = None,
            api: tuple[str, str] = ("openai", "/v1/completions")) -> dict[str, Any]:
    """The load program's argument for one scenario and seed. The model is the one the
    engine serves (its ``/v1/models``), asked by the program itself; so is the tokenizer,
    unless ``tokenizer`` names one (a GGUF's engine names none that loads). ``api`` is the
    engine's backend and endpoint (``EngineSpec.bench_api``)."""
    return {"base_url": f"http://127.0.0.1:{port}", "seed": seed,
            "input_len": scenario.input_len, "output_len": scenario.output_len,
            "concurrency": scenario.concurrency, "prompts": scenario.prompts,
            "warmups": scenario.warmups,
            "kv_gauges": list(kv_gauges), "texts": texts,
            "backend": api[0], "endpoint": api[1],
            **({"tokenizer": tokenizer} if tokenizer else {}),
            **({"trace": scenario.trace.packed(), "time_scale": scenario.replay_time_scale,
                "block_tokens": scenario.replay_block_tokens}
               if scenario.replay is not None else {})}


@dataclass(frozen=True)
class LoadResult:
    """What one run of the load program gave."""

    image_id: str
    figures: dict[str, Any]


def follow(lines: Iterable[str], node: str, alive: Callable[[float], None]) -> LoadResult:
    """Read the run command's lines; ``alive(seconds)`` on each heartbeat. A
    :class:`RemoteError` says why no result came."""
    image_id = ""
    figures: dict[str, Any] | None = None
    error: str | None = None
    tail: list[str] = []
    for line in lines:
        if line.startswith(IMAGE):
            image_id = line.removeprefix(IMAGE).strip()
        elif line.startswith(ALIVE):
            with contextlib.suppress(ValueError):
                alive(float(line.removeprefix(ALIVE)))
        elif line.startswith(RESULT):
            figures = json.loads(line.removeprefix(RESULT))
        elif line.startswith(ERROR):
            error = line.removeprefix(ERROR)
        elif line.startswith(EXIT):
            status = line.removeprefix(EXIT).strip()
            if status == str(NO_ENGINE_EXIT):
                raise RemoteError(node, "bench: no running engine container")
            if figures is not None:
                return LoadResult(image_id, figures)
            raise RemoteError(node, "bench: " + (error or f"the load program exited with "
                                                 f"status {status}: " + " | ".join(tail)))
        elif line.strip():
            tail = ([*tail, line.strip()])[-5:]
    raise RemoteError(node, "bench: the command ended without a result (cut short)")


def run_load(transport: Transport, command: Sequence[str], *,
             alive: Callable[[float], None], timeout: float) -> LoadResult:
    """Run one scenario with one seed: ``command`` is :func:`run_command`'s or
    :func:`run_beside_command`'s."""
    lines = (raw.decode("utf-8", "replace").rstrip("\r\n") for raw in
             transport.stream_lines(list(command), timeout=timeout))
    return follow(lines, transport.node.name, alive)


def append_record(transport: Transport, record: BenchRecord) -> None:
    """Keep ``record`` on its node."""
    transport.run(append_command(transport.node.base_dir, record.deployment, record),
                  timeout=RECORD_TIMEOUT_SECONDS, what="record the bench result")


def read_records(transport: Transport, deployment: str) -> tuple[list[BenchRecord], int]:
    """The deployment's records on the node, oldest first, and the unreadable lines."""
    result = transport.run(read_command(transport.node.base_dir, deployment),
                           idempotent=True, timeout=RECORD_TIMEOUT_SECONDS,
                           what="read the bench records")
    return parse_records(result.text().splitlines())
