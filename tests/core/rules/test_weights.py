"""Staged weights: a source the engine's image can fetch, landing where the engine loads."""

from __future__ import annotations

COMMIT = "0123456789abcdef0123456789abcdef01234567"
SHA = "ab" * 32
GGUF_SOURCE = {"source": {"repo": "unsloth/Qwen3.6-35B-A3B-GGUF",
                          "file": "Qwen3.6-35B-A3B-Q4_K_M.gguf", "sha256": SHA}}


def test_a_file_source_for_vllm_is_refused_with_the_kind_it_takes(kit):
    profile = kit.profile(model={"source": {"file": "q.gguf", "sha256": SHA}})
    finding = kit.only("weights-source-kind", kit.place(profile, kit.node()))
    kit.assert_message(finding, file="profiles/p.yaml", field="model.source", value="file",
                       why="boots with HF_HUB_OFFLINE=1",
                       fix="give source.revision (a commit)")
    assert finding.message.startswith("a file source cannot be staged for vLLM: it takes "
                                      "snapshot")
    snapshot = kit.profile(model={"source": {"revision": COMMIT}})
    assert not kit.run("weights-source-kind", kit.place(snapshot, kit.node()))


def test_a_snapshot_source_for_llama_cpp_is_refused(kit):
    profile = kit.llamacpp(model={"id": "unsloth/Qwen3.6-35B-A3B-GGUF",
                                  "source": {"revision": COMMIT}})
    node = kit.node("rtx5090", models_dir="/srv/models")
    finding = kit.only("weights-source-kind", kit.place(profile, node))
    assert finding.fix == ("give source.file (with source.sha256) or source.url (with "
                           "source.sha256)")


def test_the_staged_file_must_be_the_file_llama_server_loads(kit):
    profile = kit.llamacpp(model=GGUF_SOURCE, llamacpp={"gguf": "/models/other.gguf"})
    node = kit.node("rtx5090", models_dir="/srv/models")
    finding = kit.only("staged-file-not-loaded", kit.place(profile, node))
    kit.assert_message(finding, file="profiles/q.yaml", field="llamacpp.gguf",
                       value="/models/other.gguf", why="curl in llama.cpp's",
                       fix="set llamacpp.gguf: /models/Qwen3.6-35B-A3B-Q4_K_M.gguf")
    right = kit.llamacpp(model=GGUF_SOURCE)  # gguf: /models/Qwen3.6-35B-A3B-Q4_K_M.gguf
    assert not kit.run("staged-file-not-loaded", kit.place(right, node))


def test_a_file_source_needs_a_models_dir_on_the_node(kit):
    profile = kit.llamacpp(model=GGUF_SOURCE)
    finding = kit.only("staged-file-needs-models-dir",
                       kit.place(profile, kit.node("rtx5090")))
    assert finding.fix == "set models_dir in nodes/rtx5090.yaml (e.g. /srv/models)"
    assert "stages Qwen3.6-35B-A3B-Q4_K_M.gguf into the node's models_dir" in finding.message
    node = kit.node("rtx5090", models_dir="/srv/models")
    assert not kit.run("staged-file-needs-models-dir", kit.place(profile, node))
