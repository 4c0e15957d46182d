"""Read what the drift check compares from nodes: one SSH connection and one command each.

Per node, :func:`collect_node` opens one connection and runs one command, ``python3 -S -c
BOOTSTRAP``; the collector (:data:`COLLECTOR_PARTS`, joined into one program: see
:mod:`servefleet.adapters.drift_collect.collector_pure`), the request and the GPU probe's
source arrive on its stdin. It prints one JSON document (release files hashed, the engine
container inspected, the overlay marker, the latest boot's log, the node's baselines file,
the GPU reading). The engine's version is asked over HTTP from this machine. The boot log
is parsed here, with servefleet's boot-log parser.

:func:`collect_fleet` reads many nodes in parallel threads with a per-node deadline; a node
that cannot be reached comes back as an observation that says so, never as an exception.
"""

from __future__ import annotations

import base64
import hashlib
import json
import time
import zlib
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from importlib import resources
from typing import Any

from pydantic import ValidationError

from servefleet.adapters.gpu_probe import probe_script_source
from servefleet.adapters.health_gate import http_get
from servefleet.adapters.node_script import assemble
from servefleet.adapters.remote import LOCK_DIR
from servefleet.adapters.runtime import Transport, connect
from servefleet.core.baselines import BASELINE_FILE
from servefleet.core.bootlog import parse_bytes, reader_for
from servefleet.core.drift import NodeObservation
from servefleet.core.engines import ENGINES
from servefleet.core.engines.vllm import VLLM
from servefleet.core.errors import ServefleetError
from servefleet.core.gpu import parse_probe_json
from servefleet.core.models import Node
from servefleet.core.observed import (
    BootSummary,
    ObservedDeployment,
    observed_deployment,
    parse_answer,
)
from servefleet.core.render.release import ENV_FILE, IMAGE_PATCH_MARKER

READY_MARKERS = (
    "Application startup complete",  # vLLM (uvicorn)
    "server is listening on",  # llama-server
    "llama_server: listening on ",  # llama-server of 2026 (b11434), after `model loaded`
    "The server is fired up",  # SGLang
)
"""Lines that end a boot log: the collector stops reading the log there."""
LOG_MAX_BYTES = 4 * 1024 * 1024
"""The most of one boot log read (a vLLM boot log is ~100-300 kB)."""
DEFAULT_TIMEOUT_SECONDS = 60.0
"""Per-node deadline of a drift read."""
CONNECT_ATTEMPTS = 2
"""Connection attempts per node: a node that refuses twice is reported unreachable."""
HTTP_TIMEOUT_SECONDS = 5.0
"""For the engine's ``/version``."""
HttpGet = Callable[[str, float], tuple[int, bytes]]
"""``get(url, timeout) -> (status, body)``; raises :class:`OSError` when nothing answers."""


@dataclass(frozen=True)
class DeploymentQuery:
    """What to read about one deployment."""

    name: str
    """Deployment name (folder under the base directory, compose project)."""
    engine: str = "vllm"
    """``vllm`` or ``llama.cpp``: which boot-log format and which version endpoint."""
    port: int | None = None
    """Port of the engine's HTTP API; ``None`` skips the version check."""
    plain_env: tuple[str, ...] = ()
    """Environment variables known not to be secret: sent in clear (all others hashed).
    With ``container_extras`` the node adds those its compose files set, but for
    ``secret_env``."""
    secret_env: tuple[str, ...] = ()
    """The profile's secret variables: never sent in clear, whatever sets them."""
    marker: str | None = IMAGE_PATCH_MARKER
    """Overlay marker path inside the container (looked for even when none is expected, so
    a hand-patched image shows)."""
    candidate: str | None = None
    """A container the stack adopts (its name or id), inspected while the deployment has
    no current release."""


@dataclass(frozen=True)
class CollectOptions:
    """How nodes are read (the defaults are what ``servefleet drift`` uses)."""

    timeout: float = DEFAULT_TIMEOUT_SECONDS
    """Per-node deadline in seconds, connection included."""
    probe: bool = True
    """Run the GPU probe in the same round trip."""
    docker: tuple[str, ...] = ("docker",)
    """The docker CLI on the node (``("sudo", "-n", "docker")`` for a non-root user)."""
    python: str = "python3"
    """Interpreter on the node."""
    boot_log: bool = True
    """Read the latest boot's log."""
    baseline_files: tuple[str, ...] = (BASELINE_FILE,)
    """Baselines files under the node's base directory to read: the health checks' KV-pool
    and image baselines (:mod:`servefleet.core.baselines`); empty reads none."""
    http: HttpGet = field(default=http_get)
    """GET for ``/version`` (tests pass their own)."""
    connect_attempts: int = CONNECT_ATTEMPTS
    """Connection attempts before a node is unreachable."""
    container_extras: bool = True
    """Read each container's image, overlay marker and boot log (the rollout reads the
    containers alone)."""
    lock: bool = False
    """Read the node lock's owner and state lines."""
    observe_key: str = ""
    """A random key (one per read) for the keyed digests of the current ``engine.env``'s
    values; it travels on the command's stdin, never on its command line."""


COLLECTOR_PARTS = ("collector_pure.py", "collector_children.py", "collector_script.py")
"""The collector's parts, in the order they are joined into one program (see
:mod:`servefleet.adapters.node_script`)."""


def collector_source() -> str:
    """The collector's source, as sent to the node: its parts joined, with the one env-file
    hasher (:mod:`servefleet.core.envdigest`) appended: the node hashes ``engine.env``
    exactly as the renderer does."""
    script = assemble(__name__, COLLECTOR_PARTS).decode("utf-8")
    hasher = resources.files("servefleet.core").joinpath("envdigest.py").read_text("utf-8")
    return f"{script}\n\n# ---- servefleet.core.envdigest ----\n{hasher}"


def build_request(base_dir: str, queries: Sequence[DeploymentQuery],
                  options: CollectOptions) -> dict[str, Any]:
    """The request the collector reads (no secret in it; the observe key, when there is
    one, is worthless to anyone but the controller that drew it)."""
    return {
        "base_dir": base_dir,
        "deployments": [{"name": q.name, "plain_env": sorted(q.plain_env), "marker": q.marker,
                         "secret_env": sorted(q.secret_env), "candidate": q.candidate}
                        for q in queries],
        "docker": list(options.docker),
        # Drift's view of the engine service is Compose's own (docker compose config).
        "compose": [*options.docker, "compose"] if options.container_extras else None,
        "docker_checks": True,
        "container_extras": options.container_extras,
        "lock_dir": LOCK_DIR if options.lock else None,
        "observe_key": options.observe_key,
        "boot_log": options.boot_log and options.container_extras,
        "ready_markers": list(READY_MARKERS),
        "log_max_bytes": LOG_MAX_BYTES,
        # The collector stops waiting (and reports what it read) before the SSH deadline.
        "deadline_seconds": max(2, int(options.timeout * 0.8)),
        "baseline_files": list(options.baseline_files),
        "env_file": ENV_FILE,
        "manifest_file": "manifest.json",
    }


REQUEST_MARK = b"\n#-- servefleet drift request --\n"
"""Separates the collector's source from the request on the command's stdin."""
MODULE_PREFIX = "drift_collector_"

BOOTSTRAP = f"""\
import os,sys
s,_,t=sys.stdin.buffer.read().partition({REQUEST_MARK!r})
m=sys.argv[1]
d=os.path.join(os.environ.get('XDG_CACHE_HOME') or os.path.expanduser('~/.cache'),'servefleet')
try:
    f=os.path.join(d,m+'.py')
    if not os.path.isfile(f) or open(f,'rb').read()!=s:
        os.makedirs(d,exist_ok=True)
        for p in (d,os.path.join(d,'__pycache__')):
            for o in os.listdir(p) if os.path.isdir(p) else ():
                if o.startswith({MODULE_PREFIX!r}):os.remove(os.path.join(p,o))
        w=f+'.%d'%os.getpid()
        with open(w,'wb') as h:h.write(s)
        os.replace(w,f)
    sys.path.insert(0,d)
    sys.dont_write_bytecode=False
    c=__import__(m)
except Exception:
    c=type(sys)(m)
    exec(compile(s,m,'exec'),c.__dict__)
exec(compile(t,'request','exec'),{{'main':c.main,'sys':sys}})
"""
"""The command's program (``python3 -S -c BOOTSTRAP MODULE``): it keeps the collector as a
module in ``~/.cache/servefleet`` on the node, named by the sha256 of its source, so Python
compiles it once and later runs load the bytecode (about a third of the collector's start-up
cost); a cached copy that differs from the source just sent is replaced (its bytecode
removed with it), and where the cache cannot be written the source is compiled in place.
The request follows the source on stdin, after :data:`REQUEST_MARK`."""


def collector_module() -> str:
    """The collector's module name on the node: its source's sha256, so a new servefleet
    never runs an old cached copy."""
    digest = hashlib.sha256(collector_source().encode()).hexdigest()[:16]
    return MODULE_PREFIX + digest


def collector_command(python: str = "python3") -> list[str]:
    """The one command a drift read runs on a node (``-S``: the collector needs only the
    standard library; ``site`` is loaded for the GPU probe alone)."""
    return [python, "-S", "-c", BOOTSTRAP, collector_module()]


def collector_input(request: Mapping[str, Any], *, probe: bool = True) -> bytes:
    """stdin of :func:`collector_command`: the collector's source, :data:`REQUEST_MARK`,
    then the request and the probe's source as Python literals (``repr`` of JSON data:
    strings, numbers, lists, dicts) and the call of ``main``. Nothing in it is parsed by a
    shell."""
    probe_source = probe_script_source().decode("utf-8") if probe else None
    json.dumps(dict(request))  # only JSON data: its repr is a Python literal
    tail = (f"REQUEST = {dict(request)!r}\nPROBE_SOURCE = {probe_source!r}\n"
            "sys.exit(main(REQUEST, PROBE_SOURCE))\n")
    return collector_source().encode("utf-8") + REQUEST_MARK + tail.encode("utf-8")


def _boot_summary(raw: Mapping[str, Any] | None, engine: str) -> tuple[BootSummary | None,
                                                                      str | None]:
    if not raw:
        return None, None
    if raw.get("error"):
        return None, f"boot log could not be read: {raw['error']}"
    try:
        data = zlib.decompress(base64.b64decode(raw.get("gz") or ""))
    except (ValueError, zlib.error) as error:
        return None, f"boot log could not be decoded: {error}"
    facts = parse_bytes(data, reader_for(engine))
    return BootSummary(outcome=facts.outcome, kv_cache_tokens=facts.kv_cache_tokens,
                       kv_cache_mib=facts.kv_cache_mib,
                       cudagraph_mode=facts.cudagraph_mode), None


def observation_from_answer(node: str, text: str,
                            queries: Sequence[DeploymentQuery]) -> NodeObservation:
    """Turn the collector's JSON into a :class:`NodeObservation` (boot logs parsed here).

    Raises :class:`ValueError` when the text is not a collector answer.
    """
    answer = parse_answer(text)
    errors: list[str] = [str(e) for e in answer.get("errors") or []]
    deployments: dict[str, ObservedDeployment] = {}
    for query in queries:
        raw = (answer.get("deployments") or {}).get(query.name) or {}
        boot, boot_error = _boot_summary(raw.get("boot_log"), query.engine)
        if boot_error:
            errors.append(f"{query.name}: {boot_error}")
        errors.extend(f"{query.name}: {e}" for e in raw.get("errors") or [])
        if raw.get("manifest_error"):
            errors.append(f"{query.name}: {raw['manifest_error']}")
        # The rollout's parser of the deployment, plus the boot log parsed here.
        deployments[query.name] = observed_deployment(
            query.name, raw, answer.get("docker_error")).model_copy(update={"boot": boot})
    gpu = None
    gpu_error = answer.get("gpu_error")
    if answer.get("gpu") is not None:
        try:
            gpu = parse_probe_json(json.dumps(answer["gpu"]))
        except ValueError as error:
            gpu_error = str(error)[:300]
    baselines = answer.get("baselines")
    return NodeObservation(node=node, gpu=gpu, gpu_error=gpu_error, deployments=deployments,
                           baselines=baselines if isinstance(baselines, dict) else {},
                           errors=tuple(errors))


def version_url(address: str, port: int, engine: str) -> str:
    """Where an engine tells its version: vLLM ``/version``, llama-server ``/props``."""
    host = f"[{address}]" if ":" in address else address
    # vLLM's endpoint for an engine the registry does not know, as before it had one.
    path = ENGINES.get(engine, VLLM).version_path
    return f"http://{host}:{port}{path}"


def read_engine_version(address: str, port: int, engine: str, *, http: HttpGet = http_get,
                        timeout: float = HTTP_TIMEOUT_SECONDS) -> tuple[str | None, str | None]:
    """``(version, None)`` or ``(None, why not)``. vLLM answers ``{"version": …}``;
    llama-server's ``/props`` carries ``build_info`` (``b8680-1a2b3c4``)."""
    url = version_url(address, port, engine)
    try:
        status, body = http(url, timeout)
    except OSError as error:
        return None, f"GET {url}: {error}"
    if status != 200:
        return None, f"GET {url}: HTTP {status}"
    try:
        data = json.loads(body)
    except ValueError:
        return None, f"GET {url}: not JSON"
    key = ENGINES.get(engine, VLLM).version_key
    value = data.get(key) if isinstance(data, dict) else None
    if not isinstance(value, str) or not value:
        return None, f"GET {url}: no {key!r} in the answer"
    return value, None


def collect_node(node: Node, queries: Sequence[DeploymentQuery],
                 options: CollectOptions | None = None,
                 transport_factory: Callable[..., Transport] = connect,
                 ) -> NodeObservation:
    """Read one node: one SSH connection, one command, then ``/version`` over HTTP.

    Never raises for a node problem: an unreachable node, a refused host key, a failed
    command all come back in the observation.
    """
    options = options or CollectOptions()
    request = build_request(node.base_dir, queries, options)
    stdin = collector_input(request, probe=options.probe)
    try:
        with transport_factory(node, connect_attempts=options.connect_attempts) as ssh:
            # Read-only: retried once after a dropped connection.
            result = ssh.run(collector_command(options.python), stdin=stdin,
                             timeout=options.timeout, check=False, idempotent=True,
                             what="drift read")
    except ServefleetError as error:
        return NodeObservation(node=node.name, unreachable=str(error))
    except (OSError, EOFError) as error:
        return NodeObservation(node=node.name,
                               unreachable=f"{node.name}: {error or type(error).__name__}")
    if result.exit_status == 127:
        return NodeObservation(node=node.name, unreachable=(
            f"{node.name}: {options.python} is not installed on the node; the drift check "
            "needs it (as the GPU probe does)"))
    if not result.ok:
        tail = result.stderr.decode("utf-8", "replace").strip()[-300:]
        return NodeObservation(node=node.name, unreachable=(
            f"{node.name}: the drift read failed (exit {result.exit_status}): {tail}"))
    try:
        observation = observation_from_answer(node.name, result.text(), queries)
    except (ValueError, ValidationError) as error:
        return NodeObservation(node=node.name, unreachable=f"{node.name}: {error}"[:500])
    return _with_versions(node, queries, observation, options)


def _with_versions(node: Node, queries: Sequence[DeploymentQuery],
                   observation: NodeObservation, options: CollectOptions) -> NodeObservation:
    deployments = dict(observation.deployments)
    for query in queries:
        state = deployments.get(query.name)
        container = state.engine_container if state is not None else None
        if state is None or query.port is None or container is None or not container.running:
            continue
        version, error = read_engine_version(node.address, query.port, query.engine,
                                             http=options.http)
        deployments[query.name] = state.model_copy(
            update={"engine_version": version, "engine_version_error": error})
    return observation.model_copy(update={"deployments": deployments})


Target = tuple[Node, Sequence[DeploymentQuery]]
"""A node and what to read on it."""


def collect_fleet(targets: Sequence[Target], options: CollectOptions | None = None, *,
                  max_workers: int = 32,
                  transport_factory: Callable[..., Transport] = connect,
                  clock: Callable[[], float] = time.monotonic) -> dict[str, NodeObservation]:
    """Read every node in parallel threads; each gets ``options.timeout`` seconds (plus a
    little for the HTTP probe) before it is reported unreachable. Results keep the order of
    ``targets``."""
    options = options or CollectOptions()
    results: dict[str, NodeObservation] = {}
    if not targets:
        return results
    pool = ThreadPoolExecutor(max_workers=max(1, min(max_workers, len(targets))),
                              thread_name_prefix="drift")
    deadline = clock() + options.timeout + HTTP_TIMEOUT_SECONDS * 2
    futures: dict[Future[NodeObservation], str] = {
        pool.submit(collect_node, node, queries, options, transport_factory): node.name
        for node, queries in targets
    }
    pending = set(futures)
    try:
        while pending:
            remaining = deadline - clock()
            if remaining <= 0:
                break
            done, pending = wait(pending, timeout=remaining, return_when=FIRST_COMPLETED)
            for future in done:
                name = futures[future]
                try:
                    results[name] = future.result()
                except Exception as error:  # a bug must not hide the other nodes
                    results[name] = NodeObservation(
                        node=name, unreachable=f"{name}: drift read crashed: "
                                               f"{type(error).__name__}: {error}")
        for future in pending:
            name = futures[future]
            results[name] = NodeObservation(
                node=name, unreachable=f"{name}: no answer within {options.timeout:g} s")
    finally:
        # Threads stuck on a dead node are not waited for: their sockets time out alone.
        pool.shutdown(wait=False, cancel_futures=True)
    return {node.name: results[node.name] for node, _ in targets}


__all__ = [
    "BASELINE_FILE",
    "COLLECTOR_PARTS",
    "DEFAULT_TIMEOUT_SECONDS",
    "READY_MARKERS",
    "CollectOptions",
    "DeploymentQuery",
    "Target",
    "build_request",
    "collect_fleet",
    "collect_node",
    "collector_command",
    "collector_input",
    "collector_source",
    "observation_from_answer",
    "read_engine_version",
    "version_url",
]
