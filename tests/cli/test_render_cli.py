"""``servefleet render``, ``show`` and ``diff-profiles`` through click, on real files."""

from __future__ import annotations

import hashlib
import json
import stat
from collections.abc import Callable
from pathlib import Path

import yaml
from click.testing import Result

from servefleet.core.project import load_profiles, profile_identity
from servefleet.core.render import engine_command

SECRET = "hf_cli-secret-value-123"

Run = Callable[..., Result]
"""The real ``servefleet`` bound to this module's project copy and stack."""




def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_render_all_writes_every_release_with_modes(run: Run, project: Path,
                                                    tmp_path: Path) -> None:
    out = tmp_path / "out"
    result = run("render", "--all", "--out", str(out))
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert [line.split(":")[0] for line in lines[:4]] == [
        "dgx-spark-1/main", "dgx-spark-1/nomtp", "dgx-spark-2/main", "rtx5090/main"]
    assert lines[4].startswith("note: secrets were not rendered")
    for node, dep in (("dgx-spark-1", "main"), ("dgx-spark-1", "nomtp"),
                      ("dgx-spark-2", "main"), ("rtx5090", "main")):
        folder = out / node / dep
        assert sorted(p.name for p in folder.iterdir()) == [".env", "compose.yaml", "engine.env"]
        assert _mode(folder / "engine.env") == 0o600
        assert _mode(folder / "compose.yaml") == 0o644
    assert (out / "dgx-spark-1/main/engine.env").read_text().endswith("\nHF_TOKEN=\n")
    assert [p.name for p in out.iterdir() if p.name.startswith(".")] == []  # no staging left


def test_render_one_node_with_secrets_from_env(run: Run, project: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    result = run("render", "dgx-spark-2", "--out", str(out), "--with-secrets-from-env",
                 env={"HF_TOKEN": SECRET})
    assert result.exit_code == 0, result.output
    assert SECRET not in result.output
    assert "note:" not in result.output
    assert [p.name for p in out.iterdir()] == ["dgx-spark-2"]
    env_file = out / "dgx-spark-2/main/engine.env"
    assert env_file.read_text().endswith(f"\nHF_TOKEN='{SECRET}'\n")
    assert _mode(env_file) == 0o600
    for path in (out / "dgx-spark-2/main").iterdir():
        if path.name != "engine.env":
            assert SECRET not in path.read_text()


def test_render_replaces_an_earlier_release_folder(run: Run, project: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    stale = out / "rtx5090" / "main" / "Dockerfile"
    stale.parent.mkdir(parents=True)
    stale.write_text("FROM old\n")
    assert run("render", "rtx5090", "--out", str(out)).exit_code == 0
    assert not stale.exists()
    assert (out / "rtx5090/main/compose.yaml").is_file()


def test_missing_secret_writes_nothing(run: Run, project: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    result = run("render", "--all", "--out", str(out), "--with-secrets-from-env",
                 env={"HF_TOKEN": None})
    assert result.exit_code == 1
    assert "needs secret HF_TOKEN but no value was given" in result.output
    assert not out.exists()


def test_any_error_writes_nothing(run: Run, project: Path, tmp_path: Path) -> None:
    diff = b"--- a/vllm/x.py\n+++ b/vllm/x.py\n@@ -1 +1 @@\n-a\n+b\n"
    (project / "profiles/patches").mkdir(exist_ok=True)
    (project / "profiles/patches/test-x.diff").write_bytes(diff)
    (project / "profiles/broken.yaml").write_text(yaml.safe_dump({
        "extends": "qwen36-q4-llamacpp",
        "patches": [{"file": "patches/test-x.diff", "sha256": "0" * 64, "target": "vllm"}],
    }))
    stack = yaml.safe_load((project / "Pulumi.reference.yaml").read_text())
    stack["config"]["servefleet:profiles"]["rtx5090"] = "broken"
    (project / "Pulumi.reference.yaml").write_text(yaml.safe_dump(stack))
    out = tmp_path / "out"
    result = run("render", "--all", "--out", str(out))
    assert result.exit_code == 1
    actual = hashlib.sha256(diff).hexdigest()
    assert result.output.strip() == (
        "error: rtx5090/main: profile broken: profiles/broken.yaml: patches[0].sha256: patch "
        f"file profiles/patches/test-x.diff has sha256 {actual} but the profile pins {'0' * 64}; "
        f"if the new diff is intended, set patches[0].sha256 to {actual}, otherwise restore "
        "the file")
    assert not out.exists()


def test_render_usage_errors(run: Run, project: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    both = run("render", "rtx5090", "--all", "--out", str(out))
    assert both.exit_code == 2 and "give one or more NODE names, or --all" in both.output
    unknown = run("render", "nope", "--out", str(out))
    assert unknown.exit_code == 1
    assert "error: nope: not in stack 'reference'" in unknown.output
    assert not out.exists()


def test_show_prints_the_resolved_profile_identity_and_command(run: Run, project: Path) -> None:
    result = run("show", "qwen36-fp8-mtp")
    assert result.exit_code == 0, result.output
    assert result.output.startswith("# profile qwen36-fp8-mtp (extends qwen36-fp8), resolved\n")
    data = yaml.safe_load(result.output)
    profiles, _, _, _ = load_profiles(project)
    profile = profiles["qwen36-fp8-mtp"]
    assert data["identity"] == profile_identity(profile)
    assert data["engine_command"] == engine_command(profile, 8000)
    # Inherited from qwen36-fp8, overridden by the overlay:
    assert data["profile"]["vllm"]["gpu_memory_utilization"] == 0.45
    assert data["profile"]["vllm"]["speculative"] == {"method": "qwen3_next_mtp",
                                                      "num_speculative_tokens": 2}
    as_json = json.loads(run("show", "qwen36-fp8-mtp", "--json", "--port", "8001").output)
    assert as_json["engine_command"] == engine_command(profile, 8001)
    assert as_json["identity"] == data["identity"]


def test_show_unknown_profile(run: Run, project: Path) -> None:
    result = run("show", "nope")
    assert result.exit_code == 1
    assert result.output.startswith("error: no profile 'nope' in profiles/ (known: qwen36-fp8,")


def test_diff_profiles_mtp_overlay_shows_exactly_the_speculative_change(run: Run,
                                                                        project: Path) -> None:
    result = run("diff-profiles", "qwen36-fp8", "qwen36-fp8-mtp")
    assert result.exit_code == 0, result.output
    assert result.output == (
        '+ --speculative-config {"method":"qwen3_next_mtp","num_speculative_tokens":2}\n')
    back = run("diff-profiles", "qwen36-fp8-mtp", "qwen36-fp8")
    assert back.output == (
        '- --speculative-config {"method":"qwen3_next_mtp","num_speculative_tokens":2}\n')
    as_json = json.loads(run("diff-profiles", "qwen36-fp8", "qwen36-fp8-mtp",
                             "--json").output)
    assert as_json == {
        "a": "qwen36-fp8", "b": "qwen36-fp8-mtp", "engine": ["vllm", "vllm"],
        "added": {"--speculative-config":
                  '{"method":"qwen3_next_mtp","num_speculative_tokens":2}'},
        "removed": {}, "changed": {},
    }


def test_diff_profiles_same_profile_and_value_changes(run: Run, project: Path) -> None:
    same = run("diff-profiles", "qwen36-w8a16", "qwen36-w8a16")
    assert same.output == "no engine flag changes between qwen36-w8a16 and qwen36-w8a16\n"
    longer = run("diff-profiles", "qwen36-w8a16", "qwen36-w8a16-1m")
    assert longer.output.splitlines() == [
        "- --generation-config vllm",
        "+ --enable-chunked-prefill",
        '+ --hf-overrides {"text_config":{"rope_parameters":{"factor":4.0,"mrope_interleaved":'
        'true,"mrope_section":[11,11,10],"original_max_position_embeddings":262144,'
        '"partial_rotary_factor":0.25,"rope_theta":10000000,"rope_type":"yarn"}}}',
        "~ --gpu-memory-utilization: 0.92 -> 0.97",
        "~ --max-model-len: 262144 -> 1048576",
        "~ --max-num-seqs: 16 -> 2",
        "~ --max-num-batched-tokens: 65536 -> 4096",
    ]


def test_show_and_diff_name_an_unreadable_file_beside_the_profile(run: Run,
                                                                  project: Path) -> None:
    (project / "profiles" / "zero.yaml").symlink_to("/dev/zero")
    warning = ("warning: profiles/zero.yaml: is a device, not a regular file; point it at a "
               "regular file (`servefleet validate` lists every problem)")
    shown = run("show", "qwen36-fp8")
    assert shown.exit_code == 0, shown.output
    assert shown.stderr.splitlines() == [warning]
    diffed = run("diff-profiles", "qwen36-fp8", "qwen36-fp8-mtp")
    assert diffed.exit_code == 0, diffed.output
    assert diffed.stderr.splitlines() == [warning]
    assert "+ --speculative-config" in diffed.stdout
