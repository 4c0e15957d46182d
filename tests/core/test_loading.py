"""Hostile and broken input through ``load_project``: one clear line per problem, naming the
file and the field, and nothing written.

Each case starts from a copy of the shipped project in a temporary folder and breaks one
thing; the folder's files must be byte-for-byte and mtime-for-mtime unchanged afterwards.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from pathlib import Path

import pytest

from servefleet.core.errors import ConfigError
from servefleet.core.project import load_project
from tests.reference_project import copy_reference

STACK = "reference"
DIGEST = "sha256:" + "ab" * 32

Mutation = Callable[[Path], None]


@pytest.fixture()
def project_dir(tmp_path: Path) -> Path:
    """A copy of the shipped nodes, profiles and reference stack."""
    return copy_reference(tmp_path)


def snapshot(root: Path) -> dict[str, tuple[str, int]]:
    """Every file under ``root`` with its sha256 and mtime."""
    return {
        str(p.relative_to(root)): (hashlib.sha256(p.read_bytes()).hexdigest(), p.stat().st_mtime_ns)
        for p in sorted(root.rglob("*")) if p.is_file()
    }


def problems_of(root: Path, stack: str = STACK) -> list[str]:
    """The problems ``load_project`` reports; the tree must be unchanged by loading."""
    before = snapshot(root)
    with pytest.raises(ConfigError) as caught:
        load_project(root, stack)
    assert snapshot(root) == before, "loading wrote or touched files"
    problems = caught.value.problems
    assert problems
    for line in problems:
        assert "\n" not in line and "\r" not in line, repr(line)
        assert len(line) < 600, line
    assert str(caught.value) == "\n".join(problems)
    return problems


def write(root: Path, rel: str, text: str | bytes) -> None:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text)


def write_all(root: Path, files: dict[str, str]) -> None:
    for rel, text in files.items():
        write(root, rel, text)


def child(body: str, name: str = "child") -> Mutation:
    """A profile extending qwen36-fp8 with ``body`` (YAML) added."""
    return lambda root: write(root, f"profiles/{name}.yaml", "extends: qwen36-fp8\n" + body)


def llama_child(body: str) -> Mutation:
    return lambda root: write(root, "profiles/child.yaml",
                              "extends: qwen36-q4-llamacpp\n" + body)


def edit(rel: str, old: str, new: str) -> Mutation:
    def apply(root: Path) -> None:
        text = (root / rel).read_text()
        assert old in text, f"{old!r} not in {rel}"
        (root / rel).write_text(text.replace(old, new, 1))
    return apply


def append(rel: str, text: str) -> Mutation:
    return lambda root: write(root, rel, (root / rel).read_text() + text)


BILLION_LAUGHS = (
    'a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]\n'
    "b: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a]\n"
    "c: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b]\n"
    "d: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c]\n"
    "e: [*d,*d,*d,*d,*d,*d,*d,*d,*d]\n"
)


def nested(levels: int) -> str:
    """hf_overrides nested ``levels`` deep."""
    lines = ["vllm:", "  hf_overrides:"]
    lines += [" " * (4 + 2 * i) + f"k{i}:" for i in range(levels)]
    lines.append(" " * (4 + 2 * levels) + "leaf: 1")
    return "\n".join(lines) + "\n"


CASES: list[tuple[str, Mutation, str]] = [
    # malformed YAML
    ("malformed", lambda r: write(r, "profiles/broken.yaml", "engine: vllm\nvllm: {a: 1\n"),
     "profiles/broken.yaml: line 3 column 1:"),
    ("tab indent", lambda r: write(r, "profiles/broken.yaml", "vllm:\n\tmax_num_seqs: 8\n"),
     "profiles/broken.yaml: line 2 column 1: found character '\\t'"),
    ("nul byte", lambda r: write(r, "profiles/broken.yaml", "engine: vl\x00lm\n"),
     "profiles/broken.yaml: malformed YAML (unacceptable character #x0000"),
    ("not utf-8", lambda r: write(r, "profiles/broken.yaml", b"engine: \xff\xfe\n"),
     "profiles/broken.yaml: not UTF-8 text"),
    ("empty file", lambda r: write(r, "profiles/broken.yaml", ""),
     "profiles/broken.yaml: expected a mapping of profile settings"),
    ("top-level list", lambda r: write(r, "nodes/extra.yaml", "- a\n- b\n"),
     "nodes/extra.yaml: expected a mapping of node settings"),
    ("unhashable key", child("? [a, b]\n: c\n"),
     "profiles/child.yaml: line 2 column 3: a mapping key must be a plain value"),
    ("python tag", child("description: !!python/object/apply:os.system ['id']\n"),
     "profiles/child.yaml: line 2 column 14: YAML tags are not allowed"),
    # unknown keys
    ("unknown profile key", child("vllm:\n  max_num_seq: 8\n"),
     "profiles/child.yaml: vllm.max_num_seq: unknown field"),
    ("unknown node key", append("nodes/rtx5090.yaml", "gpu_count: 2\n"),
     "nodes/rtx5090.yaml: gpu_count: unknown field"),
    ("unknown stack key", append(f"Pulumi.{STACK}.yaml", "  servefleet:strategyy: rolling\n"),
     f"Pulumi.{STACK}.yaml: servefleet:strategyy: unknown setting"),
    # wrong types
    ("string for int", child("vllm:\n  max_num_seqs: lots\n"),
     "profiles/child.yaml: vllm.max_num_seqs: Input should be a valid integer"),
    ("float for version", child("engine_version: 0.21\n"),
     "profiles/child.yaml: engine_version: Input should be a valid string (got 0.21); "
     "YAML read it as a float: put it in quotes"),
    ("bool for literal", llama_child("llamacpp:\n  flash_attn: on\n"),
     "profiles/child.yaml: llamacpp.flash_attn: Input should be 'on', 'off' or 'auto' "
     "(got True); YAML read it as a bool"),
    ("node memory", edit("nodes/rtx5090.yaml", "memory_gib: 32", "memory_gib: lots"),
     "nodes/rtx5090.yaml: gpus[0].memory_gib: Input should be a valid number"),
    ("stack port", edit(f"Pulumi.{STACK}.yaml", "port: 8001", 'port: "8001; reboot"'),
     f"Pulumi.{STACK}.yaml: servefleet:profiles.dgx-spark-1.nomtp.port: Input should be a "
     "valid integer"),
    ("stack strategy", edit(f"Pulumi.{STACK}.yaml", "strategy: rolling", "strategy: yolo"),
     f"Pulumi.{STACK}.yaml: servefleet:strategy: Input should be 'parallel' or 'rolling'"),
    # names with path separators or '..'
    ("profile file name", lambda r: write(r, "profiles/Bad Name.yaml", "engine: vllm\n"),
     "profiles/Bad Name.yaml: file name is not a valid profile name"),
    ("extends traversal", lambda r: write(r, "profiles/evil.yaml", "extends: ../qwen36-fp8\n"),
     "profiles/evil.yaml: extends: no profile named '../qwen36-fp8'"),
    ("node name traversal", append("nodes/rtx5090.yaml", "name: ../../etc/passwd\n"),
     "nodes/rtx5090.yaml: name: '../../etc/passwd' is not a valid name"),
    ("stack node traversal", edit(f"Pulumi.{STACK}.yaml", "rtx5090: qwen36-q4-llamacpp",
                                  "'../../etc': qwen36-q4-llamacpp"),
     f"Pulumi.{STACK}.yaml: servefleet:profiles.'../../etc': '../../etc' is not a valid name"),
    ("stack deployment slash", edit(f"Pulumi.{STACK}.yaml", "nomtp:", "no/mtp:"),
     f"Pulumi.{STACK}.yaml: servefleet:profiles.dgx-spark-1.'no/mtp': 'no/mtp' is not a "
     "valid name"),
    ("patch traversal", child(f"patches:\n  - file: ../../secret.diff\n    sha256: {'a' * 64}\n"),
     "profiles/child.yaml: patches[0]: 'file' must be relative to the profiles folder"),
    ("compose override traversal",
     append("nodes/rtx5090.yaml", "compose_overrides: [../../etc/override.yaml]\n"),
     "nodes/rtx5090.yaml: compose_overrides: [0] '../../etc/override.yaml' must be a path "
     "relative to the project folder"),
    ("models_dir traversal", edit("nodes/rtx5090.yaml", "models_dir: /srv/models",
                                  "models_dir: /srv/../etc"),
     "nodes/rtx5090.yaml: models_dir: '/srv/../etc' must not contain '..'"),
    # shell metacharacters in values that reach a command line
    ("model id", child("model:\n  id: 'Qwen/x;reboot'\n"),
     "profiles/child.yaml: model.id: 'Qwen/x;reboot' is not a model id"),
    ("served name", child("model:\n  served_name: '$(reboot)'\n"),
     "profiles/child.yaml: model.served_name: '$(reboot)' contains characters"),
    ("revision", child("model:\n  revision: 'main`id`'\n"),
     "profiles/child.yaml: model.revision: 'main`id`' contains characters"),
    ("extra arg newline", child('vllm:\n  extra_args: ["--performance-mode=a\\nreboot"]\n'),
     "profiles/child.yaml: vllm.extra_args[0]: '--performance-mode=a\\nreboot' contains "
     "control characters"),
    ("extra arg flag", child("vllm:\n  extra_args: ['--x;reboot']\n"),
     "profiles/child.yaml: vllm.extra_args: [0] '--x;reboot' is not a '--flag'"),
    ("env newline", child('env:\n  FOO: "a\\nb"\n'),
     "profiles/child.yaml: env.FOO: 'a\\nb' contains control characters"),
    ("env name", child("env:\n  'A;B': x\n"),
     "profiles/child.yaml: env: 'A;B' is not an environment variable name"),
    ("gguf path", llama_child("llamacpp:\n  gguf: '/models/x.gguf; reboot'\n"),
     "profiles/child.yaml: llamacpp.gguf: '/models/x.gguf; reboot' contains characters"),
    ("image ref", child(f"image:\n  ref: 'vllm/vllm-openai:v0.21.0;reboot'\n  digest: {DIGEST}\n"),
     "profiles/child.yaml: image.ref: 'vllm/vllm-openai:v0.21.0;reboot' is not an image"),
    ("pip package", child("pip_packages: ['pandas; reboot']\n"),
     "profiles/child.yaml: pip_packages: 'pandas; reboot' is not a pip requirement"),
    ("node address", edit("nodes/rtx5090.yaml", "address: rtx5090.lan",
                          "address: 'rtx5090.lan && reboot'"),
     "nodes/rtx5090.yaml: address: 'rtx5090.lan && reboot' is neither a host name"),
    # YAML alias bombs, anchors, merge keys, duplicate keys
    ("alias bomb", lambda r: write(r, "profiles/bomb.yaml", BILLION_LAUGHS),
     "profiles/bomb.yaml: line 1 column 4: YAML anchors (&name) are not allowed"),
    ("anchor", child("description: &d shared\n"),
     "profiles/child.yaml: line 2 column 14: YAML anchors (&name) are not allowed"),
    ("merge key", child("vllm:\n  <<: {max_num_seqs: 8}\n"),
     "profiles/child.yaml: line 3 column 3: YAML merge keys (<<) are not allowed"),
    ("duplicate key", child("description: a\ndescription: b\n"),
     "profiles/child.yaml: line 3 column 1: key 'description' appears twice"),
    # huge files and deep nesting
    ("huge file", lambda r: write(r, "profiles/huge.yaml", "# " + "x" * 300 * 1024 + "\n"),
     "profiles/huge.yaml: file is larger than the 256 KiB limit"),
    ("deep nesting", child(nested(40)), "profiles/child.yaml: line"),
    ("bracket bomb", lambda r: write(r, "profiles/deep.yaml", "a: " + "[" * 100_000),
     "profiles/deep.yaml: line 1 column 35: nested deeper than 32 levels"),
    # extends: cycles and unknown parents
    ("extends cycle", lambda r: write_all(r, {"profiles/a.yaml": "extends: b\n",
                                              "profiles/b.yaml": "extends: a\n"}),
     "profiles/a.yaml: extends: cycle a -> b -> a"),
    ("extends self", lambda r: write(r, "profiles/a.yaml", "extends: a\n"),
     "profiles/a.yaml: extends: cycle a -> a"),
    ("unknown parent", lambda r: write(r, "profiles/a.yaml", "extends: nope\n"),
     "profiles/a.yaml: extends: no profile named 'nope' in profiles/"),
    # references between files
    ("unknown profile in stack", edit(f"Pulumi.{STACK}.yaml", "rtx5090: qwen36-q4-llamacpp",
                                      "rtx5090: qwen99"),
     f"Pulumi.{STACK}.yaml: servefleet:profiles.rtx5090: no profile 'qwen99' in profiles/"),
    ("name differs from file", append("nodes/rtx5090.yaml", "name: rtx5091\n"),
     "nodes/rtx5090.yaml: name: 'rtx5091' differs from the file name 'rtx5090'"),
    # control characters (a YAML block scalar's trailing newline) in any rendered string
    ("model id block scalar", child("model:\n  id: |\n    Qwen/Qwen3.6-35B-A3B-FP8\n"),
     "profiles/child.yaml: model.id: 'Qwen/Qwen3.6-35B-A3B-FP8\\n' contains control"),
    ("image ref newline", child(f"image:\n  ref: \"vllm/vllm-openai:v0.21.0\\n\"\n"
                               f"  digest: {DIGEST}\n"),
     "profiles/child.yaml: image.ref: 'vllm/vllm-openai:v0.21.0\\n' contains control"),
    ("image digest newline", child(f"image:\n  digest: \"{DIGEST}\\n\"\n"),
     "profiles/child.yaml: image.digest: "),
    ("extra arg trailing newline", child('vllm:\n  extra_args: ["--enable-foo\\n"]\n'),
     "profiles/child.yaml: vllm.extra_args[0]: '--enable-foo\\n' contains control"),
    ("env value escape", child('env:\n  FOO: "a\\e[31mb"\n'),
     "profiles/child.yaml: env.FOO: 'a\\x1b[31mb' contains control characters"),
    ("env key newline", child('env:\n  "FOO\\n": x\n'),
     "profiles/child.yaml: env.'FOO\\n'"),
    ("secret_env newline", child('secret_env: ["HF_TOKEN\\n"]\n'),
     "profiles/child.yaml: secret_env[0]: 'HF_TOKEN\\n' contains control characters"),
    ("pip package newline", child('pip_packages: ["pandas==2.0\\n"]\n'),
     "profiles/child.yaml: pip_packages[0]: 'pandas==2.0\\n' contains control"),
    ("speculative model tab", child('vllm:\n  speculative: {method: eagle, '
                                    'num_speculative_tokens: 1, model: "a\\tb"}\n'),
     "profiles/child.yaml: vllm.speculative.model: 'a\\tb' contains control characters"),
    ("chat kwargs nested", child('vllm:\n  default_chat_template_kwargs: {a: {b: "x\\ny"}}\n'),
     "profiles/child.yaml: vllm.default_chat_template_kwargs.a: "),
    ("label key newline", edit("nodes/rtx5090.yaml", "labels:\n", 'labels:\n  "rack\\n": r1\n'),
     "nodes/rtx5090.yaml: labels.'rack\\n'"),
    ("label value tab", edit("nodes/rtx5090.yaml", "  site: home-lab", '  site: "home\\tlab"'),
     "nodes/rtx5090.yaml: labels.site: 'home\\tlab' contains control characters"),
    ("gpu name newline", edit("nodes/rtx5090.yaml", "name: NVIDIA GeForce RTX 5090",
                              'name: "NVIDIA GeForce RTX 5090\\n"'),
     "nodes/rtx5090.yaml: gpus[0].name: 'NVIDIA GeForce RTX 5090\\n' contains control"),
    ("compute capability newline", edit("nodes/rtx5090.yaml", 'compute_capability: "12.0"',
                                        'compute_capability: "12.0\\n"'),
     "nodes/rtx5090.yaml: gpus[0].compute_capability: '12.0\\n' contains control"),
    ("deployment name newline", edit(f"Pulumi.{STACK}.yaml", "nomtp:", '"nomtp\\n":'),
     f"Pulumi.{STACK}.yaml: servefleet:profiles.dgx-spark-1.'nomtp\\n': 'nomtp\\n' contains"),
    ("stack node newline", edit(f"Pulumi.{STACK}.yaml", "rtx5090: qwen36-q4-llamacpp",
                                '"rtx5090\\n": qwen36-q4-llamacpp'),
     f"Pulumi.{STACK}.yaml: servefleet:profiles.'rtx5090\\n': 'rtx5090\\n' contains"),
    ("stack profile newline", edit(f"Pulumi.{STACK}.yaml", "rtx5090: qwen36-q4-llamacpp",
                                   'rtx5090: "qwen36-q4-llamacpp\\n"'),
     f"Pulumi.{STACK}.yaml: servefleet:profiles.rtx5090: 'qwen36-q4-llamacpp\\n' contains"),
    ("secretEnv name", append(f"Pulumi.{STACK}.yaml",
                              '  "servefleet:secretEnv.A\\nB":\n    secure: v1:x\n'),
     f"Pulumi.{STACK}.yaml: 'servefleet:secretEnv.A\\nB': 'A\\nB' is not an environment"),
    # huge numbers: one line, no traceback
    ("5000-digit int", child("vllm:\n  max_num_seqs: " + "9" * 5000 + "\n"),
     "profiles/child.yaml: line 3 column 17: a number of 5000 characters"),
    ("5000-digit quoted int", child('vllm:\n  max_num_seqs: "' + "9" * 5000 + '"\n'),
     "profiles/child.yaml: vllm.max_num_seqs: Unable to parse input string as an integer"),
    # addresses
    ("address option", edit("nodes/rtx5090.yaml", "address: rtx5090.lan",
                            "address: -oProxyCommand=id"),
     "nodes/rtx5090.yaml: address: '-oProxyCommand=id' is neither a host name"),
    ("address trailing newline", edit("nodes/rtx5090.yaml", "address: rtx5090.lan",
                                      'address: "rtx5090.lan\\n"'),
     "nodes/rtx5090.yaml: address: 'rtx5090.lan\\n' contains control characters"),
    # compose overrides outside the project
    ("override absolute", append("nodes/rtx5090.yaml", "compose_overrides: [/etc/shadow]\n"),
     "nodes/rtx5090.yaml: compose_overrides: [0] '/etc/shadow' must be a path relative"),
]


@pytest.mark.parametrize(("mutate", "expected"), [(m, e) for _, m, e in CASES],
                         ids=[name for name, _, _ in CASES])
def test_bad_input_gives_one_clear_line(project_dir: Path, mutate: Mutation, expected: str):
    mutate(project_dir)
    problems = problems_of(project_dir)
    assert any(line.startswith(expected) for line in problems), problems


def test_deep_nesting_names_the_depth(project_dir: Path):
    child(nested(40))(project_dir)
    assert any("nested deeper than 32 levels" in p for p in problems_of(project_dir))


def test_shipped_project_loads(project_dir: Path):
    project = load_project(project_dir, STACK)
    assert set(project.stack.nodes) == {"dgx-spark-1", "dgx-spark-2", "rtx5090"}


def test_every_problem_reported_together(project_dir: Path):
    child("vllm:\n  max_num_seq: 8\n")(project_dir)
    append("nodes/rtx5090.yaml", "gpu_count: 2\n")(project_dir)
    problems = problems_of(project_dir)
    assert any(p.startswith("profiles/child.yaml: vllm.max_num_seq") for p in problems)
    assert any(p.startswith("nodes/rtx5090.yaml: gpu_count") for p in problems)


def test_hostile_stack_name(project_dir: Path):
    problems = problems_of(project_dir, stack="../../etc/passwd")
    assert problems == ["stack name '../../etc/passwd' is not valid (lower-case letters, "
                        "digits, '.', '_', '-')"]


def test_missing_stack_file(project_dir: Path):
    assert problems_of(project_dir, stack="prod") == [
        f"Pulumi.prod.yaml: no such stack file in {project_dir} (stacks here: {STACK}); pick "
        f"one with --stack {STACK} (or export SERVEFLEET_STACK={STACK})"]
