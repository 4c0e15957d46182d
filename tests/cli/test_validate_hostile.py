"""``servefleet validate`` on hostile input: one line naming the file and the field, no
Python traceback, exit 1 and nothing written, for everything ``render`` would refuse too."""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import Result

Run = Callable[..., Result]
Mutation = Callable[[Path], None]
STACK_FILE = "Pulumi.reference.yaml"
PATCH = "profiles/patches/vllm-pr40798-turboquant-workspace.diff"


def tree(root: Path) -> dict[str, tuple[str, int]]:
    """Every file with its sha256 and mtime (symlinks and devices are not followed)."""
    return {str(p.relative_to(root)): (hashlib.sha256(p.read_bytes()).hexdigest(),
                                        p.stat().st_mtime_ns)
            for p in sorted(root.rglob("*")) if p.is_file() and not p.is_symlink()}


def edit(rel: str, old: str, new: str) -> Mutation:
    def mutate(root: Path) -> None:
        path = root / rel
        text = path.read_text()
        assert old in text, (rel, old)
        path.write_text(text.replace(old, new, 1))
    return mutate


def append(rel: str, text: str) -> Mutation:
    return lambda root: (root / rel).write_text((root / rel).read_text() + text)


def chain(*mutations: Mutation) -> Mutation:
    def mutate(root: Path) -> None:
        for mutation in mutations:
            mutation(root)
    return mutate


def symlink(rel: str, target: str) -> Mutation:
    def mutate(root: Path) -> None:
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        if path.exists() or path.is_symlink():
            path.unlink()
        path.symlink_to(target)
    return mutate


def write(rel: str, text: str) -> Mutation:
    def mutate(root: Path) -> None:
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return mutate


# The TurboQuant profile (with its patch overlay) on the RTX 5090, so render reads the patch.
USE_PATCH = edit(STACK_FILE, "rtx5090: qwen36-q4-llamacpp", "rtx5090: qwen36-nvfp4-tq")

CASES: list[tuple[str, Mutation, str]] = [
    # 1. control characters in any string that reaches a rendered file or a shell
    ("model id newline", edit("profiles/qwen36-fp8.yaml", "id: Qwen/Qwen3.6-35B-A3B-FP8",
                              'id: "Qwen/Qwen3.6-35B-A3B-FP8\\n"'),
     "profiles/qwen36-fp8.yaml: model.id: 'Qwen/Qwen3.6-35B-A3B-FP8\\n' contains control"),
    ("description tab", edit("profiles/qwen36-fp8.yaml", "description: Qwen3.6-35B-A3B-FP8 on",
                             'description: "a\\tb"\nx_description: Qwen3.6-35B-A3B-FP8 on'),
     "profiles/qwen36-fp8.yaml: description: 'a\\tb' contains control characters"),
    ("env key newline", edit("profiles/qwen36-fp8.yaml", "env:\n", 'env:\n  "FOO\\n": x\n'),
     "profiles/qwen36-fp8.yaml: env.'FOO\\n'"),
    ("secret_env escape", edit("profiles/qwen36-fp8.yaml", "secret_env: [HF_TOKEN]",
                               'secret_env: ["HF_TOKEN\\e"]'),
     "profiles/qwen36-fp8.yaml: secret_env[0]: 'HF_TOKEN\\x1b' contains control"),
    ("label value newline", edit("nodes/rtx5090.yaml", "labels:\n", 'labels:\n  rack: "r1\\n"\n'),
     "nodes/rtx5090.yaml: labels.rack: 'r1\\n' contains control characters"),
    ("hf_overrides string", edit("profiles/qwen36-fp8.yaml", "vllm:\n",
                                 'vllm:\n  hf_overrides: {a: ["x\\ny"]}\n'),
     "profiles/qwen36-fp8.yaml: vllm.hf_overrides.a: 'x\\ny' contains control"),
    ("deployment name newline", edit(STACK_FILE, "nomtp:", '"nomtp\\n":'),
     f"{STACK_FILE}: servefleet:profiles.dgx-spark-1.'nomtp\\n': 'nomtp\\n' contains control"),
    # 2. huge numbers
    ("5000-digit port", edit(STACK_FILE, "port: 8001", "port: " + "9" * 5000),
     f"{STACK_FILE}: line"),
    ("5000-digit quoted port", edit(STACK_FILE, "port: 8001", 'port: "' + "9" * 5000 + '"'),
     f"{STACK_FILE}: servefleet:profiles.dgx-spark-1.nomtp.port: Unable to parse"),
    ("5000-digit float", append("profiles/qwen36-fp8.yaml", "shm_size_gib: 1." + "1" * 5000),
     "profiles/qwen36-fp8.yaml: line"),
    # 3. files that never end or are not regular
    ("profile is /dev/zero", symlink("profiles/zero.yaml", "/dev/zero"),
     "profiles/zero.yaml: is a device, not a regular file"),
    ("profile is a folder", lambda r: (r / "profiles/dir.yaml").mkdir(),
     "profiles/dir.yaml: is a directory, not a regular file"),
    ("node is a FIFO", lambda r: os.mkfifo(r / "nodes/fifo.yaml"),
     "nodes/fifo.yaml: is a FIFO, not a regular file"),
    # 4. compose overrides outside the project
    ("override absolute", append("nodes/rtx5090.yaml", "compose_overrides: [/etc/shadow]\n"),
     "nodes/rtx5090.yaml: compose_overrides: [0] '/etc/shadow' must be a path relative"),
    ("override home", append("nodes/rtx5090.yaml", "compose_overrides: ['~/x.yaml']\n"),
     "nodes/rtx5090.yaml: compose_overrides: [0] '~/x.yaml' must be a path relative"),
    ("override symlink out", chain(symlink("overrides/o.yaml", "/etc/passwd"),
                                   append("nodes/rtx5090.yaml",
                                          "compose_overrides: [overrides/o.yaml]\n")),
     "nodes/rtx5090.yaml: compose_overrides[0]: 'overrides/o.yaml' points outside the project"),
    ("override is /dev/zero", chain(symlink("overrides/z.yaml", "/dev/zero"),
                                    append("nodes/rtx5090.yaml",
                                           "compose_overrides: [overrides/z.yaml]\n")),
     "nodes/rtx5090.yaml: compose_overrides[0]: 'overrides/z.yaml' points outside the project"),
    ("override is a FIFO", chain(lambda r: (r / "overrides").mkdir(),
                                 lambda r: os.mkfifo(r / "overrides/f.yaml"),
                                 append("nodes/rtx5090.yaml",
                                        "compose_overrides: [overrides/f.yaml]\n")),
     "nodes/rtx5090.yaml: compose_overrides[0]: 'overrides/f.yaml': is a FIFO, not a regular"),
    ("override template unsafe", chain(
        write("overrides/evil.yaml.j2", "x: {{ ''.__class__.__mro__ }}\n"),
        append("nodes/rtx5090.yaml", "compose_overrides: [overrides/evil.yaml.j2]\n")),
     "nodes/rtx5090.yaml: compose_overrides[0]: compose override overrides/evil.yaml.j2: "
     "access to attribute '__class__'"),
    # 5. patch problems render would find, found by validate first
    ("patch sha mismatch", chain(USE_PATCH, append(PATCH, "\n")),
     "profiles/qwen36-nvfp4-tq.yaml: patches[0].sha256: patch file " + PATCH + " has sha256"),
    ("patch symlinked", chain(USE_PATCH, lambda r: (r / "profiles/real.diff").write_bytes(
        (r / PATCH).read_bytes()), symlink(PATCH, "../real.diff")),
     "profiles/qwen36-nvfp4-tq.yaml: patches[0].file: " + PATCH + " is (or passes through) "
     "a symbolic link"),
    ("patch missing", chain(USE_PATCH, lambda r: (r / PATCH).unlink()),
     "profiles/qwen36-nvfp4-tq.yaml: patches[0].file: patch file " + PATCH + " does not exist"),
    # 6. node addresses that would be read as options
    ("address option", edit("nodes/rtx5090.yaml", "address: rtx5090.lan",
                            "address: -oProxyCommand=id"),
     "nodes/rtx5090.yaml: address: '-oProxyCommand=id' is neither a host name"),
    ("address leading dash label", edit("nodes/rtx5090.yaml", "address: rtx5090.lan",
                                        "address: a.-b"),
     "nodes/rtx5090.yaml: address: 'a.-b' is neither a host name"),
    # 7. plaintext secrets in a committed stack file
    ("plaintext hfToken", append(STACK_FILE, "  servefleet:hfToken: hf_abcdefghijklmnop\n"),
     f"{STACK_FILE}: servefleet:hfToken: a secret is stored in plain text in the stack file "
     "(which is committed to git); remove the line and run `pulumi config set --secret "
     "servefleet:hfToken …`"),
    ("plaintext secretEnv", append(STACK_FILE, "  servefleet:secretEnv.WANDB_KEY: abc\n"),
     f"{STACK_FILE}: servefleet:secretEnv.WANDB_KEY: a secret is stored in plain text"),
    ("other provider password", append(STACK_FILE, "  db:password: hunter2\n"),
     f"{STACK_FILE}: db:password: a secret is stored in plain text"),
    ("token-looking value", append(STACK_FILE, "  servefleet:profiles.rtx5090: "
                                               "hf_abcdefghijklmnopqrs\n"),
     f"{STACK_FILE}: servefleet:profiles.rtx5090: holds a value that looks like a credential"),
]


@pytest.mark.parametrize(("mutate", "expected"), [(m, e) for n, m, e in CASES if e],
                         ids=[n for n, _, e in CASES if e])
def test_hostile_input_is_one_line_no_traceback_nothing_written(
        run: Run, project: Path, mutate: Mutation, expected: str) -> None:
    mutate(project)
    before = tree(project)
    result = run("validate")
    assert result.exit_code == 1, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), \
        repr(result.exception)
    assert "Traceback" not in result.output
    assert "hf_abcdefghijklmnop" not in result.output  # a leaked secret is never echoed
    as_json = run("validate", "--json")
    assert as_json.exit_code == 1
    report = json.loads(as_json.output)
    lines = [*report["load_errors"], *(f"{f['file']}: {f['field']}: {f['message']}"
                                       for f in report["findings"] if f["severity"] == "error")]
    assert all("\n" not in line for line in lines), lines
    assert any(line.startswith(expected) for line in lines), lines
    assert tree(project) == before


def test_validate_reports_a_render_refusal_with_file_and_field_in_json(
        run: Run, project: Path) -> None:
    chain(USE_PATCH, append(PATCH, "\n"))(project)
    result = run("validate", "--json")
    assert result.exit_code == 1
    findings = json.loads(result.output)["findings"]
    refused = [f for f in findings if f["rule"] == "render-refused"]
    assert [(f["file"], f["field"]) for f in refused] == [
        ("profiles/qwen36-nvfp4-tq.yaml", "patches[0].sha256")]


def test_plain_project_still_renders_with_secure_secret(run: Run, project: Path) -> None:
    append(STACK_FILE, "  servefleet:hfToken:\n    secure: v1:AAAABBBBCCCC\n")(project)
    result = run("validate")
    assert result.exit_code == 0, result.output


def test_keyscan_suggestion_is_quoted(run: Run, project: Path) -> None:
    result = run("validate")
    assert "ssh-keyscan -t ed25519 -- rtx5090.lan" in result.output
