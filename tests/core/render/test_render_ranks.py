"""Ranks of an engine spanning nodes: command lines, environment, one release id."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from multinode_pair import load

from servefleet.core.errors import RenderError
from servefleet.core.render.ranks import render_multinode


def _compose(release) -> dict:  # type: ignore[no-untyped-def]
    return dict(yaml.safe_load(release.files["compose.yaml"]))


def test_head_and_worker_command_lines(tmp_path: Path) -> None:
    project = load(tmp_path)
    rendered = render_multinode(project, project.stack.multi_node[0], None,
                                require_secrets=False)
    head, worker = rendered.ranks
    assert (head.node, worker.node) == ("dgx-spark-1", "dgx-spark-2")
    tail = ["--distributed-executor-backend", "mp", "--nnodes", "2", "--node-rank", "0",
            "--master-addr", "192.168.177.11", "--master-port", "29501"]
    assert list(head.engine_argv[-len(tail):]) == tail
    assert "--headless" not in head.engine_argv
    assert worker.engine_argv[-1] == "--headless"
    assert worker.engine_argv[worker.engine_argv.index("--node-rank") + 1] == "1"
    # The worker points at the head's fast-link address, not its own.
    assert worker.engine_argv[worker.engine_argv.index("--master-addr") + 1] == "192.168.177.11"
    assert "--tensor-parallel-size" in head.engine_argv
    assert "--pipeline-parallel-size" not in head.engine_argv


def test_rank_environment_devices_and_healthcheck(tmp_path: Path) -> None:
    project = load(tmp_path)
    head, worker = render_multinode(project, project.stack.multi_node[0], None,
                                    require_secrets=False).ranks
    head_service = _compose(head)["services"]["engine"]
    worker_service = _compose(worker)["services"]["engine"]
    assert head_service["environment"]["VLLM_HOST_IP"] == "192.168.177.11"
    assert worker_service["environment"]["VLLM_HOST_IP"] == "192.168.177.12"
    for name in ("NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME", "TP_SOCKET_IFNAME",
                 "UCX_NET_DEVICES"):
        assert worker_service["environment"][name] == "enp1s0f1np1"
    assert worker_service["environment"]["NCCL_IB_HCA"] == "rocep1s0f1,roceP2p1s0f1"
    assert worker_service["environment"]["NCCL_IB_DISABLE"] == "0"
    assert "NCCL_DEBUG" not in worker_service["environment"]
    assert worker_service["devices"] == ["/dev/infiniband"]
    assert worker_service["cap_add"] == ["IPC_LOCK"]
    assert worker_service["network_mode"] == "host"
    assert worker_service["healthcheck"]["test"] == ["NONE"]
    assert head_service["healthcheck"]["test"][0] == "CMD"
    assert worker_service["labels"]["io.servefleet.rank"] == "1"
    assert worker_service["labels"]["io.servefleet.ranks"] == "dgx-spark-1,dgx-spark-2"


def test_one_release_id_changes_on_every_rank(tmp_path: Path) -> None:
    project = load(tmp_path / "a")
    first = render_multinode(project, project.stack.multi_node[0], None, require_secrets=False)
    assert {r.release_id for r in first.ranks} == {first.release_id}
    assert first.ranks[0].files != first.ranks[1].files
    # A flag both ranks run changes the release of both, together.
    changed = load(tmp_path / "b", profile={"extends": "qwen36-fp8", "vllm": {
        "tensor_parallel_size": 2, "max_num_seqs": 7}})
    second = render_multinode(changed, changed.stack.multi_node[0], None,
                              require_secrets=False)
    assert second.release_id != first.release_id
    assert {r.release_id for r in second.ranks} == {second.release_id}
    again = render_multinode(project, project.stack.multi_node[0], None, require_secrets=False)
    assert again.release_id == first.release_id
    assert [r.files for r in again.ranks] == [r.files for r in first.ranks]


def test_nccl_debug_and_pipeline_parallel(tmp_path: Path) -> None:
    project = load(tmp_path, entry={"profile": "qwen36-fp8-tp2", "ncclDebug": True,
                                    "pipelineParallel": 2, "masterPort": 29600,
                                    "nodes": ["dgx-spark-2", "dgx-spark-1"]})
    head, worker = render_multinode(project, project.stack.multi_node[0], None,
                                    require_secrets=False).ranks
    assert head.node == "dgx-spark-2"
    argv = list(worker.engine_argv)
    assert argv[argv.index("--pipeline-parallel-size") + 1] == "2"
    assert argv[argv.index("--master-port") + 1] == "29600"
    assert argv[argv.index("--master-addr") + 1] == "192.168.177.12"
    assert _compose(worker)["services"]["engine"]["environment"]["NCCL_DEBUG"] == "INFO"


def test_without_rdma_devices_ib_is_off(tmp_path: Path) -> None:
    project = load(tmp_path, node_changes={
        "dgx-spark-2": {"fast_link": {"interface": "veth1", "address": "10.0.0.2"}}})
    worker = render_multinode(project, project.stack.multi_node[0], None,
                              require_secrets=False).ranks[1]
    service = _compose(worker)["services"]["engine"]
    assert service["environment"]["NCCL_IB_DISABLE"] == "1"
    assert "NCCL_IB_HCA" not in service["environment"]
    assert "devices" not in service and "cap_add" not in service


def test_node_without_fast_link_is_refused(tmp_path: Path) -> None:
    project = load(tmp_path)
    nodes = dict(project.nodes)
    nodes["dgx-spark-2"] = nodes["dgx-spark-2"].model_copy(update={"fast_link": None})
    bare = type(project)(**{**project.__dict__, "nodes": nodes})
    with pytest.raises(RenderError, match="dgx-spark-2 has no fast_link"):
        render_multinode(bare, bare.stack.multi_node[0], None, require_secrets=False)
