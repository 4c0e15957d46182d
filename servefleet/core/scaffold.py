"""What ``servefleet init`` writes into a new config repository, as data.

The operator owns the repository from then on: a Pulumi project whose program is
servefleet's own (``__main__.py`` imports it from the installed package), a stack file that
places nothing yet, the shipped profiles as starting points, an example node that is not
loaded, and the JSON Schemas its files point their editors at. Everything here is text built
from its inputs; the caller reads the shipped profiles and writes the files (never over an
existing one).
"""

from __future__ import annotations

import json
import re
import textwrap
from collections.abc import Mapping
from dataclasses import dataclass

from servefleet.core.errors import ConfigError
from servefleet.core.models.common import NAME_RE
from servefleet.core.project import NODES_DIR, PROFILES_DIR, SECRET_KEYS, STACK_FILE
from servefleet.core.schema import SCHEMA_FILES, SCHEMAS, modeline

DEFAULT_STACK = "home"
"""The stack ``servefleet init`` creates unless told otherwise."""
PULUMI_PROJECT = "servefleet"
"""``name:`` of the new ``Pulumi.yaml`` when the folder's name cannot be one."""


def pulumi_project_name(folder: str) -> str:
    """The new ``Pulumi.yaml``'s ``name:``: the folder's, so that two config repos sharing
    one ``pulumi login --local`` backend never share a stack (``<project>/<stack>``); the
    program reads the ``servefleet:`` config namespace whatever the project is called."""
    name = re.sub(r"[^A-Za-z0-9_.-]+", "-", folder).strip("-.")
    return name[:100] or PULUMI_PROJECT
EXAMPLE_NODE = f"{NODES_DIR}/example.yaml.sample"
"""The commented example node: not ``*.yaml``, so never loaded."""
EXAMPLE_NODE_NAME = "gpu-box"
"""The node name the examples use."""
GB10_NODE = f"{NODES_DIR}/gb10.yaml.sample"
"""The commented DGX Spark (GB10) example node: unified memory and CUDA's own figures."""
SEEDS_FILE = "scenarios/seeds.yaml"
"""The bench scenarios ``servefleet bench`` reads by default (copied from the shipped ones)."""
EXAMPLE_PROFILE = "qwen36-q4-llamacpp"
"""The profile the examples place (one 32 GB GPU, llama.cpp)."""


@dataclass(frozen=True)
class ScaffoldFile:
    """One file of the new repository."""

    path: str
    """Path relative to the repository root, ``/``-separated."""
    content: bytes
    """The file's bytes."""


PULUMI_YAML = """\
# The Pulumi project of this fleet. Its program (__main__.py) is servefleet's own, imported
# from the installed package: Pulumi runs `python3` from PATH (or PULUMI_PYTHON_CMD), so
# activate the environment servefleet is installed in before `pulumi up`.
name: {project}
description: LLM inference engines on GPU nodes you own, rolled out over SSH
runtime:
  name: python
  options:
    toolchain: pip
"""

MAIN_PY = '''\
"""The Pulumi program: servefleet's, from the installed package. One NodeDeployment per
node that Pulumi.<stack>.yaml places a profile on, one MultiNodeDeployment per engine
spanning nodes (servefleet:multiNode)."""

from pathlib import Path

from servefleet.adapters.pulumi_program import run

run(Path(__file__).resolve().parent)
'''

GITIGNORE = """\
__pycache__/
*.pyc
.venv/
# `servefleet render --out out/` writes env files (secrets included) here.
/out/
# Pulumi state when logged in with `pulumi login file://.` (`--local` keeps it in ~/.pulumi).
/.pulumi/
"""

STACK_YAML = """\
{modeline}
# Stack {stack!r}: which serving profile runs on which node. `servefleet … --stack {stack}` and
# `pulumi up` (stack {stack}) both read this file. It places nothing yet.
#
# Place a profile on a node (a file nodes/<node>.yaml) under servefleet:profiles, e.g.
#   servefleet:profiles:
#     {node}: {profile}
# or two engines on one node, each on one of the node's ports:
#   servefleet:profiles:
#     {node}:
#       main: {{profile: qwen36-fp8-mtp, port: 8000}}
#       nomtp: {{profile: qwen36-fp8, port: 8001}}
# or, once the Pulumi stack exists (`pulumi stack init {stack}`):
#   pulumi config set servefleet:profiles.{node} {profile}
# Profiles in profiles/ (copies of servefleet's, yours to edit; `extends:` inherits one):
{profiles}
#
# Secrets never go into this file in plain text (`servefleet validate` refuses them); Pulumi
# keeps them encrypted here:
{secrets}
config:
  # parallel: every node at once; rolling: one node at a time, stopping at the first failure.
  servefleet:strategy: rolling
  # Releases kept on each node for `servefleet rollback`.
  servefleet:keepReleases: 5
  servefleet:profiles: {{}}
"""

SECRET_LINES = {
    "hfToken": "pulumi config set --secret servefleet:hfToken hf_…      # gated models",
    "apiKey": "pulumi config set --secret servefleet:apiKey …        # the engines' API key",
}

EXAMPLE_NODE_YAML = """\
{modeline}
# An example node. NOT loaded: servefleet reads nodes/*.yaml only. Copy it to
# nodes/<name>.yaml (the file name is the node's name: lower-case letters, digits, . _ -) and
# make every value true of your machine:
#   - address and ssh: the SSH user must be in the node's `docker` group (Docker Engine with
#     the Compose plugin and the NVIDIA container toolkit installed there);
#   - gpus, driver_version, cuda_version: as `nvidia-smi` prints them on the node; once the
#     host key is pinned, `servefleet probe <name>` reads them and says what differs;
#   - ssh.host_keys: `servefleet keyscan <name>` prints the line and its fingerprint; check
#     the fingerprint on the node's console (`ssh-keygen -lf
#     /etc/ssh/ssh_host_ed25519_key.pub`), then paste the line there. servefleet never
#     trusts a host key on first use.
# Every field, with its meaning: schemas/node.schema.json (editors complete from it).
address: {node}.lan
ssh:
  user: servefleet
  port: 22
  agent: true  # keys from ssh-agent; or identity_file: /home/you/.ssh/id_ed25519
  host_keys: []
arch: x86_64
gpus:
  - name: NVIDIA GeForce RTX 5090
    count: 1
    memory_gib: 32
    compute_capability: "12.0"
    # What vLLM sizes against: CUDA reports 31.37 GiB of the 32 GB. Measure yours with
    # `servefleet probe <name>` and keep the figure it gives.
    cuda_memory_gib: 31.37
    memory_source: "vLLM's log on an RTX 5090: total_gpu_memory (31.37GiB), vllm#14452"
host_memory_gib: 64
driver_version: "580.142"
cuda_version: "13.0"
# Releases live here; the SSH user must own it.
base_dir: /srv/servefleet
# Hugging Face cache mounted into engines (weights land here: leave room for them).
hf_cache: /home/servefleet/.cache/huggingface
# Local model files (GGUF), mounted read-only at /models.
models_dir: /srv/models
ports: [8000, 8001]
"""


GB10_NODE_YAML = """\
{modeline}
# An example DGX Spark (GB10 Grace-Blackwell superchip, 128 GB LPDDR5x shared by CPU and
# GPU). NOT loaded: copy it to nodes/<name>.yaml and make every value true of your box (see
# example.yaml.sample for address, ssh and host_keys: `servefleet keyscan <name>`).
address: {node}.lan
ssh:
  user: servefleet
  port: 22
  agent: true
  host_keys: []
arch: aarch64
gpus:
  - name: NVIDIA GB10
    count: 1
    memory_gib: 128
    unified_memory: true
    compute_capability: "12.1"
    # CUDA reports 121.69 GiB of the 128 GB, and frees at most ~102 GiB at boot, so vLLM's
    # startup check refuses gpu_memory_utilization above 0.83 here. Measure yours with
    # `servefleet probe <name>` and set both figures from it.
    cuda_memory_gib: 121.69
    boot_free_gib: 102.2
    memory_source: "GB10 boots reported in MiaAI-Lab/GLM-5.3-Flash-EXL3-2x-DGX-Sparks#47
      (free at boot 101.3-102.2 of 121.69 GiB, drivers 580 and 610)"
host_memory_gib: 128
driver_version: "580.142"
cuda_version: "13.0"
base_dir: /srv/servefleet
hf_cache: /home/servefleet/.cache/huggingface
ports: [8000, 8001]
"""


def check_stack_name(stack: str) -> None:
    """Refuse a stack name servefleet and Pulumi would not both accept."""
    if not NAME_RE.match(stack):
        raise ConfigError(f"stack name {stack!r} is not valid (lower-case letters, digits, "
                          "'.', '_', '-')")


def stack_file_text(stack: str, profile_names: list[str]) -> str:
    """``Pulumi.<stack>.yaml``: valid, placing nothing, saying how to place and what to keep
    secret."""
    secrets = [SECRET_LINES.get(key, f"pulumi config set --secret servefleet:{key} …")
               for key in SECRET_KEYS]
    secrets.append("pulumi config set --secret servefleet:secretEnv.NAME …  # any other "
                   "variable")
    return STACK_YAML.format(
        modeline=modeline("stack", 0), stack=stack, node=EXAMPLE_NODE_NAME,
        profile=EXAMPLE_PROFILE,
        profiles="\n".join(textwrap.wrap(", ".join(profile_names) or "(none)", width=92,
                                         initial_indent="#   ", subsequent_indent="#   ")),
        secrets="\n".join(f"#   {line}" for line in secrets))


def scaffold(stack: str, profiles: Mapping[str, bytes], *,
             project: str = PULUMI_PROJECT,
             scenarios: bytes | None = None) -> list[ScaffoldFile]:
    """Every file of a new config repository for ``stack``, in the order they are reported.

    ``profiles`` maps each shipped file's path under ``profiles/`` (``qwen36-fp8.yaml``,
    ``patches/….diff``) to its bytes; they are copied as they are. ``project`` names the
    Pulumi project (see :func:`pulumi_project_name`). ``scenarios``: the shipped
    ``scenarios/seeds.yaml``, written as :data:`SEEDS_FILE` (``servefleet bench``).
    """
    check_stack_name(stack)
    names = sorted(p[:-len(".yaml")] for p in profiles if "/" not in p and p.endswith(".yaml"))
    texts = [
        ("Pulumi.yaml", PULUMI_YAML.format(project=project)),
        ("__main__.py", MAIN_PY),
        (STACK_FILE.format(stack=stack), stack_file_text(stack, names)),
        (".gitignore", GITIGNORE),
        (EXAMPLE_NODE, EXAMPLE_NODE_YAML.format(modeline=modeline("node", 1),
                                                node=EXAMPLE_NODE_NAME)),
        (GB10_NODE, GB10_NODE_YAML.format(modeline=modeline("node", 1), node="spark-1")),
    ]
    files = [ScaffoldFile(path, text.encode()) for path, text in texts]
    if scenarios is not None:
        files.append(ScaffoldFile(SEEDS_FILE, scenarios))
    # The profiles first, then the folders they name files in (models/, patches/).
    files += [ScaffoldFile(f"{PROFILES_DIR}/{rel}", profiles[rel])
              for rel in sorted(profiles, key=lambda rel: ("/" in rel, rel))]
    files += [ScaffoldFile(SCHEMA_FILES[name], (json.dumps(build(), indent=2,
                                                          ensure_ascii=False) + "\n").encode())
              for name, build in SCHEMAS.items()]
    return files


def next_steps(stack: str, where: str | None) -> list[str]:
    """What the operator does after ``init``, in order (``where``: the ``cd`` target, when
    the repository is not the current folder): ``servefleet deploy`` first, which needs
    nothing but SSH; the Pulumi route after it, with how to get the CLI (the servefleet
    package ships only Pulumi's Python SDK) and what the stack's passphrase is for."""
    node, profile = "NAME", EXAMPLE_PROFILE
    stack_file = STACK_FILE.format(stack=stack)
    steps = [f"cd {where}"] if where else []
    steps += [
        f"servefleet node add {node} ADDRESS --user USER --identity-file KEY   # shows the "
        "host key's fingerprint: check it on the node's console, answer y; writes "
        f"{NODES_DIR}/{node}.yaml from what the node reports (by hand instead: cp "
        f"{EXAMPLE_NODE}, then servefleet keyscan {node})",
        f"place a profile in {stack_file}:   servefleet:profiles: {{{node}: {profile}}}",
        f"servefleet validate --stack {stack}",
        f"servefleet plan --stack {stack}",
        f"servefleet deploy --stack {stack}   # no Pulumi needed: health-gated, rolled back "
        "on failure; export HF_TOKEN=… first only for a gated model (model.gated)",
        "optional, the same deploy through Pulumi: the Pulumi CLI is not in the servefleet "
        "package (pip installs only its Python SDK); install it from "
        "https://www.pulumi.com/docs/iac/download-install/ (`curl -fsSL "
        "https://get.pulumi.com | sh -s -- --version $(pip show pulumi | sed -n "
        "'s/^Version: //p')`, the SDK's version) or, in a servefleet source checkout, "
        "`export PATH=\"$(scripts/ensure-pulumi):$PATH\"`",
        f"pulumi login --local && pulumi stack init {stack}   # the passphrase it asks for "
        f"encrypts the stack's secrets (servefleet:hfToken) in {stack_file}: keep it, and "
        "export PULUMI_CONFIG_PASSPHRASE=… for every later pulumi command",
        "pulumi config set --secret servefleet:hfToken hf_…   # only for gated models",
        "pulumi up   # shows the preview (and what each engine change does), then asks",
    ]
    return steps
