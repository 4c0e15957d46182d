"""llama-server rules."""

from __future__ import annotations


def test_llamacpp_determinism_settings(kit):
    bad = kit.llamacpp(llamacpp={"parallel": 4, "cache_prompt": None},
                       health={"determinism": {"wanted": True}})
    findings = {f.field: f for f in kit.run("llamacpp-determinism-settings", kit.alone(bad))}
    assert set(findings) == {"llamacpp.parallel", "llamacpp.cache_prompt"}
    kit.assert_message(findings["llamacpp.parallel"], file="profiles/q.yaml",
                       field="llamacpp.parallel", value="4", why="#6950",
                       fix="llamacpp.parallel: 1")
    kit.assert_message(findings["llamacpp.cache_prompt"], file="profiles/q.yaml",
                       field="llamacpp.cache_prompt", value="(not set)", why="#22224",
                       fix="cache_prompt: false")
    good = kit.llamacpp(health={"determinism": {"wanted": True}})  # parallel 1, no cache
    assert not kit.run("llamacpp-determinism-settings", kit.alone(good))
    not_wanted = kit.llamacpp(llamacpp={"parallel": 4})
    assert not kit.run("llamacpp-determinism-settings", kit.alone(not_wanted))


def test_llamacpp_quantized_v_needs_flash_attn(kit):
    bad = kit.llamacpp(llamacpp={"cache_type_v": "q8_0", "flash_attn": "off"})
    finding = kit.only("llamacpp-quantized-v-needs-flash-attn", kit.alone(bad))
    kit.assert_message(finding, file="profiles/q.yaml", field="llamacpp.cache_type_v",
                       value="q8_0", why="requires flash_attn", fix='flash_attn: "on"')
    good = kit.llamacpp(llamacpp={"cache_type_v": "q8_0", "flash_attn": "on"})
    assert not kit.run("llamacpp-quantized-v-needs-flash-attn", kit.alone(good))
