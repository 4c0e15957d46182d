"""Model files: the GGUF must be in a folder the node mounts."""

from __future__ import annotations


def test_a_gguf_on_a_node_without_models_dir_is_an_error(kit):
    profile = kit.llamacpp()  # llamacpp.gguf: /models/Qwen3.6-35B-A3B-Q4_K_M.gguf
    finding = kit.only("model-file-not-mounted", kit.place(profile, kit.node("rtx5090")))
    kit.assert_message(finding, file="profiles/q.yaml", field="llamacpp.gguf",
                       value="/models/Qwen3.6-35B-A3B-Q4_K_M.gguf", why="mounts only",
                       fix="set models_dir in nodes/rtx5090.yaml")
    assert finding.message == (
        "/models/Qwen3.6-35B-A3B-Q4_K_M.gguf is not inside the engine's container on node "
        "rtx5090 (deployment rtx5090/main, nodes/rtx5090.yaml): nodes/rtx5090.yaml sets no "
        "models_dir, so nothing is mounted at /models; llama-server stops with 'failed to "
        "load model'")
    mounted = kit.node("rtx5090", models_dir="/srv/models")
    assert not kit.run("model-file-not-mounted", kit.place(profile, mounted))


def test_a_gguf_outside_every_mounted_folder_is_an_error(kit):
    profile = kit.llamacpp(llamacpp={"gguf": "/opt/llm/q4.gguf"})
    node = kit.node("rtx5090", models_dir="/srv/models")
    finding = kit.only("model-file-not-mounted", kit.place(profile, node))
    assert "it lies in no folder the node mounts: only /root/.cache/huggingface (hf_cache " \
        "/root/.cache/huggingface) and /models (models_dir /srv/models) are there" \
        in finding.message
    assert finding.fix == "put the file under the node's models_dir and name it as " \
        "/models/<file>"
    # the Hugging Face cache is always mounted
    cached = kit.llamacpp(llamacpp={"gguf": "/root/.cache/huggingface/hub/q4.gguf"})
    assert not kit.run("model-file-not-mounted", kit.place(cached, kit.node("rtx5090")))
