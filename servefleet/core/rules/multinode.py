"""Rules on engines that span several nodes (``servefleet:multiNode`` in the stack file).

Each check looks at one multi-node deployment with every node it spans, so a finding can
name both nodes of a mismatched pair in one line. The file named is the one to change:
the stack file for the placement, a node's inventory file for a missing fast link.
"""

from __future__ import annotations

from collections.abc import Iterator

from servefleet.core.engines import engine_of
from servefleet.core.engines.vllm import vllm_settings
from servefleet.core.errors import RenderError
from servefleet.core.models import MultiNodeDeployment, Node
from servefleet.core.multinode_config import KEY
from servefleet.core.project import Project
from servefleet.core.render.ranks import render_multinode
from servefleet.core.rules.base import Finding, Severity
from servefleet.core.rules.facts import gpu_memory_utilization

DEADLOCK_DRIVER_BRANCH = "590."
"""GB10 driver branch reported to deadlock during CUDA-graph capture of a multi-node engine
(590.x; 580.x works), as the two-Spark tools report."""

RULE_IDS = (
    "multinode-engine", "multinode-parallel-size", "multinode-ranks-differ",
    "multinode-fast-link-missing", "multinode-ports", "multinode-driver-deadlock",
    "multinode-memory-per-rank", "multinode-render-refused",
)
"""Every rule of this module."""


def _finding(rule: str, file: str, field: str, value: object, message: str, why: str,
             fix: str, severity: Severity = Severity.ERROR) -> Finding:
    return Finding(rule=rule, severity=severity, file=file, field=field, value=value,
                   message=message, why=why, fix=fix)


def _facts(node: Node) -> dict[str, str]:
    """What must be equal on every rank: one engine, one set of kernels and one NCCL."""
    gpu = node.primary_gpu
    return {"arch": node.arch, "GPU": gpu.name, "compute capability": gpu.compute_capability,
            "driver": node.driver_version or "(not set)",
            "CUDA": node.cuda_version or "(not set)"}


def check_deployment(project: Project, dep: MultiNodeDeployment) -> Iterator[Finding]:
    """Every finding about one multi-node deployment."""
    stack = project.stack_file
    base = f"{KEY}.{dep.name}"
    nodes = [project.nodes[n] for n in dep.nodes]
    pair = " + ".join(dep.nodes)
    profile = project.profiles[dep.profile]
    if not engine_of(profile).spans_nodes:
        yield _finding("multinode-engine", stack, f"{base}.profile", dep.profile,
                       f"profile {dep.profile} runs {profile.engine}; an engine spanning "
                       f"{pair} must be vLLM", "only vLLM's --nnodes/--headless spans nodes",
                       "choose a vLLM profile")
        return
    if dep.backend == "ray":
        yield _finding("multinode-engine", stack, f"{base}.backend", "ray",
                       f"backend ray for {pair} is not rendered by servefleet (its workers "
                       "need a Ray cluster started before vllm serve)",
                       "vLLM PR #23691 made the multiprocessing executor span nodes",
                       "use backend: native")
    settings = vllm_settings(profile)  # the only engine that spans nodes
    tp = settings.tensor_parallel_size or 1
    pp = dep.pipeline_parallel_size
    gpus = sum(n.gpu_count for n in nodes)
    if tp * pp != gpus:
        per = ", ".join(f"{n.name} {n.gpu_count}" for n in nodes)
        yield _finding(
            "multinode-parallel-size", stack, f"{base}.nodes", dep.nodes,
            f"tensor_parallel_size {tp} × pipelineParallel {pp} = {tp * pp} GPUs, but "
            f"{pair} have {gpus} ({per})",
            "vLLM runs one worker per GPU and --nnodes splits the world size evenly",
            f"make TP × PP equal {gpus} (profile {dep.profile}: vllm.tensor_parallel_size, "
            f"or {base}.pipelineParallel)")
    facts = [_facts(n) for n in nodes]
    for key in facts[0]:
        values = {n.name: f[key] for n, f in zip(nodes, facts, strict=True)}
        if len(set(values.values())) > 1:
            shown = " but ".join(f"{name} has {key} {value}" for name, value in values.items())
            yield _finding(
                "multinode-ranks-differ", stack, f"{base}.nodes", dep.nodes,
                f"{shown}: every rank of one engine needs the same {key}",
                "ranks exchange tensors through NCCL with kernels built once for one "
                "platform; a mismatch hangs or fails at the first collective",
                f"place {dep.name} on nodes with the same {key}, or align the inventory "
                "with what the nodes run (servefleet probe NODE)")
    for node in nodes:
        if node.fast_link is None:
            yield _finding(
                "multinode-fast-link-missing", project.node_files[node.name], "fast_link",
                None, f"{node.name} spans {dep.name} with {pair} but has no fast link",
                "NCCL, Gloo and torch.distributed must be told the interface "
                "(NCCL_SOCKET_IFNAME…) or they pick the management network",
                "add fast_link: {interface: enp1s0f1np1, address: <IP on it>, "
                "ib_hcas: [rocep1s0f1, roceP2p1s0f1]}")
    yield from _ports(project, dep, nodes, base)
    for node in nodes:
        driver = node.driver_version or ""
        if "GB10" in node.primary_gpu.name and driver.startswith(DEADLOCK_DRIVER_BRANCH) \
                and not settings.enforce_eager:
            yield _finding(
                "multinode-driver-deadlock", project.node_files[node.name], "driver_version",
                driver, f"{node.name} (GB10) runs driver {driver}, reported to deadlock "
                f"during CUDA-graph capture of an engine spanning {pair}",
                "two-Spark vLLM setups report 590.x hanging at graph capture; 580.x works",
                "install the 580 driver branch on every rank (and set driver_version), or "
                f"set vllm.enforce_eager: true in profile {dep.profile}")
    weights = profile.model.weights_gib
    if weights is not None:
        share = weights / (tp * pp)
        util = gpu_memory_utilization(profile)
        for node in nodes:
            budget = node.primary_gpu.cuda_total_gib * util
            if share > budget:
                yield _finding(
                    "multinode-memory-per-rank", stack, f"{base}.nodes", dep.nodes,
                    f"each rank of {pair} holds {share:.1f} GiB of weights "
                    f"({weights:g} GiB / {tp * pp}), more than {node.name}'s "
                    f"{budget:.1f} GiB ({node.primary_gpu.cuda_total_gib:g} GiB × {util:g})",
                    "weights split evenly across TP × PP ranks; KV cache needs room on top",
                    "span more nodes, or use a smaller checkpoint")


def _ports(project: Project, dep: MultiNodeDeployment, nodes: list[Node],
           base: str) -> Iterator[Finding]:
    stack = project.stack_file
    head = nodes[0]
    port = dep.port or head.ports[0]
    if port not in head.ports:
        yield _finding("multinode-ports", stack, f"{base}.port", port,
                       f"port {port} is not among {head.name}'s ports "
                       f"({', '.join(map(str, head.ports))})",
                       "nodes list the ports engines may use (firewall, other services)",
                       f"pick one of them, or add {port} to nodes/{head.name}.yaml ports")
    if dep.master_port == port:
        yield _finding("multinode-ports", stack, f"{base}.masterPort", dep.master_port,
                       f"masterPort {dep.master_port} is also the API port on {head.name}",
                       "torch.distributed's rendezvous and the API server cannot share it",
                       "choose another masterPort (vLLM's default is 29501)")
    others = [(d.node, d.name, project.port_of(d)) for d in project.stack.deployments]
    for other in project.stack.multi_node:
        if other is not dep:
            other_port = other.port or project.nodes[other.head].ports[0]
            others += [(n, other.name, other_port) for n in other.nodes]
            others.append((other.head, other.name, other.master_port))
    for node in nodes:
        for on, name, used in others:
            if on != node.name:
                continue
            if name == dep.name:
                yield _finding("multinode-ports", stack, base, dep.name,
                               f"deployment {dep.name} spans {' + '.join(dep.nodes)} but "
                               f"{node.name} already has a deployment called {name}",
                               "one compose project servefleet-<name> per node",
                               "rename one of them")
            elif used in (port, dep.master_port) and node.name == dep.head:
                yield _finding("multinode-ports", stack, f"{base}.port", used,
                               f"port {used} on {node.name} is also used by {name}",
                               "two listeners cannot share a port on one host network",
                               "give one of them another port")


def multinode_findings(project: Project, *, render: bool = True) -> list[Finding]:
    """Every finding about the stack's multi-node deployments; with ``render``, render
    refusals too."""
    findings: list[Finding] = []
    for dep in project.stack.multi_node:
        before = len(findings)
        findings.extend(check_deployment(project, dep))
        if len(findings) > before or not render:
            continue  # a render of a refused placement would only repeat it
        try:
            render_multinode(project, dep, None, require_secrets=False)
        except RenderError as error:
            findings.append(_finding(
                "multinode-render-refused", project.stack_file, f"{KEY}.{dep.name}",
                dep.name, " ".join(str(error).split()),
                "servefleet render refuses this deployment",
                "fix the file named in the message, then run servefleet validate again"))
    return findings
