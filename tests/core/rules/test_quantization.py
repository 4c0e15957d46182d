"""``--quantization`` rules."""

from __future__ import annotations


def test_quantization_turboquant(kit):
    bad = kit.profile(vllm={"quantization": "turboquant"})
    finding = kit.only("quantization-turboquant", kit.alone(bad))
    kit.assert_message(finding, file="profiles/p.yaml", field="vllm.quantization",
                       value="turboquant", why="vLLM #41560",
                       fix="vllm.kv_cache_dtype: turboquant_4bit_nc")
    # Not reported twice as an unknown method.
    assert not kit.run("quantization-unknown", kit.alone(bad))
    assert not kit.run("quantization-turboquant", kit.alone(kit.profile()))


def test_quantization_unknown(kit):
    bad = kit.profile(vllm={"quantization": "awq-marlin"})
    finding = kit.only("quantization-unknown", kit.alone(bad))
    kit.assert_message(finding, file="profiles/p.yaml", field="vllm.quantization",
                       value="awq-marlin", why="vllm==0.21.0", fix="awq_marlin")
    good = kit.profile(vllm={"quantization": "compressed-tensors"})
    assert not kit.run("quantization-unknown", kit.alone(good))
    # No checked list for 0.19: methods change between releases, so it is not judged.
    unchecked = kit.profile(engine_version="0.19.0", vllm={"quantization": "awq-marlin"})
    assert not kit.run("quantization-unknown", kit.alone(unchecked))
