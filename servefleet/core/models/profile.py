"""Serving profiles: what engine runs, with which model and flags, and what a healthy boot
looks like. One YAML file per profile under ``profiles/``; ``extends:`` inherits another.

A field left at ``None`` is not rendered: the engine's own default applies.
"""

from __future__ import annotations

import re
from typing import Literal, TypeVar

from pydantic import Field, field_validator, model_validator

from servefleet.core.models.common import (
    AbsPath,
    JsonText,
    Name,
    SafeToken,
    Sha256Hex,
    SingleLine,
    StrictModel,
    Text,
)
from servefleet.core.models.health import CudaGraphMode as CudaGraphMode
from servefleet.core.models.health import DeterminismSettings as DeterminismSettings
from servefleet.core.models.health import HealthExpectations
from servefleet.core.models.weights import ModelSource

DIGEST_RE = re.compile(r"^sha256:[0-9a-f]{64}\Z")
IMAGE_REF_RE = re.compile(
    r"^(?:[a-z0-9.-]+(?::\d+)?/)?[a-z0-9]+(?:[._/-][a-z0-9]+)*:[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}\Z"
)
MODEL_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*(?:/[A-Za-z0-9][A-Za-z0-9._-]*)?\Z")
EXTRA_FLAG_RE = re.compile(r"^--[a-z0-9][a-z0-9-]*(?:\.[a-z0-9_]+)*\Z")
ENV_NAME_RE = re.compile(r"^[A-Z_][A-Z0-9_]*\Z")
PIP_REQ_RE = re.compile(
    r"^[A-Za-z0-9][A-Za-z0-9._-]*(?:\[[A-Za-z0-9,._-]+\])?(?:[=<>!~]=?[A-Za-z0-9.*+!-]+)?\Z"
)
_EnvNames = TypeVar("_EnvNames", dict[str, str], list[str])

Engine = Literal["vllm", "llama.cpp"]
Platform = Literal["linux/amd64", "linux/arm64"]
ALL_PLATFORMS: tuple[Platform, ...] = ("linux/amd64", "linux/arm64")
HUB_TOKEN_SECRETS = frozenset({"HF_TOKEN", "HUGGING_FACE_HUB_TOKEN"})
"""Secrets that only let the engine download from the Hugging Face hub: needed for a gated
model (``model.gated``), optional for a public one."""

KvCacheDtype = Literal[
    "auto", "float16", "bfloat16", "fp8", "fp8_e4m3", "fp8_e5m2", "fp8_inc", "fp8_ds_mla",
    "nvfp4_ds_mla", "turboquant_k8v4", "turboquant_4bit_nc", "turboquant_k3v4_nc",
    "turboquant_3bit_nc", "octave_k3v4", "octave_k3v3", "octave_k3v3_compact",
    "ultraquant_4bit", "int4_per_token_head", "int8_per_token_head", "fp8_per_token_head",
    "nvfp4", "nvfp4_4over6",
]
"""Every ``--kv-cache-dtype`` value of vLLM up to 0.33; rules check the version."""



def version_tuple(version: str) -> tuple[int, ...]:
    """The numeric release part of an engine version: ``0.19.1rc1.dev328`` → ``(0, 19, 1)``.

    llama.cpp builds (``b8680``) become ``(8680,)``.
    """
    match = re.match(r"^v?b?(\d+(?:\.\d+)*)", version)
    if not match:
        return ()
    return tuple(int(p) for p in match.group(1).split("."))


class ImageRef(StrictModel):
    """The engine image, pinned: a human-readable tag plus the digest that is actually run."""

    ref: Text
    """Repository and tag, e.g. ``vllm/vllm-openai:v0.21.0``."""
    digest: Text
    """Content digest ``sha256:…`` the tag pointed to when the profile was written."""
    platforms: list[Platform] = Field(default_factory=lambda: list(ALL_PLATFORMS))
    """Architectures the image is published for; checked against each node's CPU."""
    provides: list[SafeToken] = Field(default_factory=list)
    """Capabilities the image has beyond what its engine version implies, named like a
    patch's ``provides`` (e.g. a nightly built after a PR merged: ``turboquant-hybrid``)."""

    @field_validator("ref")
    @classmethod
    def _ref_has_tag(cls, value: str) -> str:
        if not IMAGE_REF_RE.match(value):
            raise ValueError(
                f"{value!r} is not an image reference 'repository:tag' (lower-case repository, "
                "an explicit tag, no digest here: put it in image.digest)"
            )
        return value

    @field_validator("digest")
    @classmethod
    def _digest_format(cls, value: str) -> str:
        if not DIGEST_RE.match(value):
            raise ValueError(f"{value!r} is not a digest 'sha256:<64 hex digits>'")
        return value

    @property
    def pinned(self) -> str:
        """``repository:tag@sha256:…``: what compose files reference."""
        return f"{self.ref}@{self.digest}"


class ModelConfigRef(StrictModel):
    """A pinned copy of a checkpoint's ``config.json``, relative to the profiles folder."""

    file: SafeToken
    """Path relative to ``profiles/``, e.g. ``models/qwen3.6-35b-a3b.config.json``."""
    sha256: Sha256Hex
    """Expected sha256 of that file; a mismatch is refused rather than planned from."""

    @field_validator("file")
    @classmethod
    def _file_inside(cls, value: str) -> str:
        if value.startswith("/") or ".." in value.split("/"):
            raise ValueError("'file' must be relative to the profiles folder, without '..'")
        return value


class ModelSpec(StrictModel):
    """The model served, and the facts about it that validation rules need."""

    id: Text
    """Hugging Face repository id (``Qwen/Qwen3.6-35B-A3B-FP8``) or, for llama.cpp, a label."""
    revision: SafeToken | None = None
    """Branch, tag or commit (e.g. ``fp8-head``); ``None`` = the default branch."""
    served_name: SafeToken
    """Name clients use in API calls (``--served-model-name`` / ``--alias``)."""
    architecture: SafeToken | None = None
    """Architecture class vLLM resolves, e.g. ``Qwen3_5MoeForConditionalGeneration``."""
    hybrid_gdn: bool = False
    """Hybrid Gated-DeltaNet (linear attention) + attention model, e.g. Qwen3.5/3.6 MoE."""
    native_context: int | None = Field(None, gt=0)
    """``max_position_embeddings`` of the checkpoint."""
    weights_gib: float | None = Field(None, gt=0)
    """Memory the weights take once loaded (vLLM's "Model loading took X GiB")."""
    quant_format: Literal[
        "bf16", "fp16", "fp8", "nvfp4", "mxfp4", "int8", "int4", "awq", "gptq", "gguf"
    ] | None = None
    """Weight format of the checkpoint, used for GPU-capability checks."""
    kv_bytes_per_token: int | None = Field(None, gt=0)
    """KV-cache bytes one token takes across every layer that holds KV, at 16 bits per
    element (Qwen3.6-35B-A3B: 10 attention layers × 2 KV heads × (256 + 256) × 2 B = 20480);
    memory rules scale it by the KV-cache dtype."""
    config: ModelConfigRef | None = None
    """The checkpoint's own ``config.json``, pinned under ``profiles/`` (layer types, KV
    heads, head dim, GDN state shapes, MTP layers): the KV-pool planner reads it."""
    fp8_lm_head: bool = False
    """The checkpoint stores lm_head in FP8 (e.g. the NVFP4 checkpoint's ``fp8-head``
    branch); vLLM needs the compressed-tensors lm_head dispatch overlay for it."""
    tokenizer: Text | None = None
    """The Hugging Face tokenizer (repository id, or a folder in the load container) that
    ``servefleet bench`` counts tokens with, where the engine's ``/v1/models`` names none
    that loads: a GGUF served by llama-server (``Qwen/Qwen3.6-35B-A3B``). Not part of the
    profile's identity: it changes no engine."""
    source: ModelSource | None = None
    """Where the weights come from, pinned: a rollout stages them on the node before the
    old engine stops, and the engine then boots with the hub offline (``None``: the engine
    fetches or finds them itself, as before)."""
    gated: bool = False
    """The Hugging Face repository is gated (a licence to accept; e.g. Llama, Gemma): its
    download needs ``HF_TOKEN``, so a deploy asks for it. A public model (the default; every
    shipped Qwen profile) deploys without it: ``HF_TOKEN`` in ``secret_env`` is then used
    when set (rate limits) and only warned about when not."""

    @field_validator("id")
    @classmethod
    def _id_format(cls, value: str) -> str:
        if not MODEL_ID_RE.match(value) or ".." in value:
            raise ValueError(
                f"{value!r} is not a model id like 'org/name' (letters, digits, . _ -)"
            )
        return value

    @model_validator(mode="after")
    def _source_matches(self) -> ModelSpec:
        source = self.source
        if source is None or source.kind == "url":
            return self
        if source.repo is None and "/" not in self.id:
            raise ValueError(f"source: model.id {self.id!r} is a label, not a repository: "
                             "give source.repo as 'org/name'")
        if source.kind == "snapshot" and source.repo_for(self.id) == self.id and \
                self.revision is not None and self.revision != source.revision:
            raise ValueError(f"model.revision {self.revision!r} and source.revision "
                             f"{source.revision!r} differ: the engine would load another "
                             "revision than the one staged (drop model.revision)")
        return self

    @property
    def engine_revision(self) -> str | None:
        """The revision the engine loads: the staged snapshot's commit, else ``revision``."""
        source = self.source
        if source is not None and source.kind == "snapshot" and source.repo_for(self.id) == \
                self.id:
            return source.revision
        return self.revision


class SpeculativeConfig(StrictModel):
    """``--speculative-config``: speculative decoding (MTP, EAGLE, n-gram…)."""

    method: Literal[
        "mtp", "qwen3_next_mtp", "qwen3_5_mtp", "deepseek_mtp", "eagle", "eagle3", "ngram",
        "ngram_gpu", "suffix", "draft_model", "dflash", "medusa",
    ]
    """Method; every MTP alias (``qwen3_next_mtp``…) is rewritten to ``mtp`` by vLLM."""
    num_speculative_tokens: int = Field(ge=1, le=16)
    """Tokens proposed per step; always rendered explicitly."""
    model: Text | None = None
    """Draft model for EAGLE/draft-model methods; MTP reuses the target model."""

    @property
    def is_mtp(self) -> bool:
        """Multi-token prediction heads of the target model."""
        return self.method in {"mtp", "qwen3_next_mtp", "qwen3_5_mtp", "deepseek_mtp"}


class VllmSettings(StrictModel):
    """``vllm serve`` flags; ``None`` leaves the engine default."""

    gpu_memory_utilization: float | None = Field(None, gt=0, le=1)
    """Fraction of total device memory this engine may take (``ceil(total × util)``)."""
    max_model_len: int | None = Field(None, gt=0)
    """Longest request (prompt + output) in tokens."""
    max_num_seqs: int | None = Field(None, ge=1)
    """Requests scheduled at once."""
    max_num_batched_tokens: int | None = Field(None, ge=1)
    """Tokens per scheduler step: the chunked-prefill chunk size."""
    kv_cache_dtype: KvCacheDtype | None = None
    """KV-cache storage type (``fp8_e4m3``, ``turboquant_4bit_nc``…)."""
    enable_chunked_prefill: bool | None = None
    """Split long prompts into ``max_num_batched_tokens`` chunks."""
    enable_prefix_caching: bool | None = None
    """Reuse KV blocks across requests with a shared prefix."""
    async_scheduling: bool | None = None
    """Overlap scheduling with execution (``--no-async-scheduling`` to turn off)."""
    speculative: SpeculativeConfig | None = None
    """Speculative decoding; ``None`` = off."""
    tensor_parallel_size: int | None = Field(None, ge=1, le=64)
    """GPUs one engine spans."""
    dtype: Literal["auto", "half", "float16", "bfloat16", "float", "float32"] | None = None
    """Activation/weight dtype."""
    quantization: SafeToken | None = None
    """``--quantization``; usually taken from the checkpoint, leave empty."""
    reasoning_parser: SafeToken | None = None
    """Reasoning parser name (``qwen3`` for Qwen3.5/3.6)."""
    tool_call_parser: SafeToken | None = None
    """Tool-call parser name (``qwen3_coder``, ``qwen3_xml``…)."""
    enable_auto_tool_choice: bool = False
    """Let the model decide to call tools; needs ``tool_call_parser``."""
    default_chat_template_kwargs: dict[Text, JsonText] | None = None
    """Merged into every request's ``chat_template_kwargs`` (thinking off by default)."""
    thinking_token_budget: int | None = Field(None, ge=0)
    """Reasoning-token cap clients are expected to send (``thinking_token_budget``)."""
    generation_config: SafeToken | None = None
    """``auto`` (model's generation_config.json), ``vllm``, or a folder."""
    hf_overrides: dict[Text, JsonText] | None = None
    """JSON merged into the Hugging Face config (e.g. a YaRN rope override)."""
    trust_remote_code: bool = False
    """Allow the checkpoint's own Python code."""
    attention_backend: SafeToken | None = None
    """Force an attention backend (``FLASHINFER``…); ``None`` = vLLM chooses."""
    language_model_only: bool = False
    """Skip the vision encoder of a multimodal checkpoint."""
    enforce_eager: bool = False
    """No CUDA graphs (debugging only)."""
    extra_args: list[Text] = Field(default_factory=list)
    """Escape hatch: more flags, each ``--flag`` or ``--flag=value`` (validated; a flag
    servefleet already manages is refused, so there is one source of truth)."""

    @field_validator("extra_args")
    @classmethod
    def _extra_args_are_flags(cls, args: list[str]) -> list[str]:
        for index, arg in enumerate(args):
            flag, _, value = arg.partition("=")
            if not EXTRA_FLAG_RE.match(flag):
                raise ValueError(
                    f"[{index}] {arg!r} is not a '--flag' or '--flag=value' (lower-case flag "
                    "names)"
                )
            # Tabs, escapes and line breaks have no business in a flag value; a line break
            # would also split the command in logs and env files.
            if not value.isprintable():
                raise ValueError(
                    f"[{index}] {flag}: value must be one line of printable characters"
                )
        return args


class LlamaCppSettings(StrictModel):
    """``llama-server`` flags."""

    gguf: AbsPath
    """Path of the GGUF file inside the container (the node's ``models_dir`` is /models)."""
    ctx_size: int | None = Field(None, ge=0)
    """``-c``: total context across slots (0 = from the model)."""
    parallel: int | None = Field(None, ge=1, le=256)
    """``-np``: server slots."""
    gpu_layers: int | Literal["all", "auto"] | None = "all"
    """``-ngl``: layers on the GPU."""
    flash_attn: Literal["on", "off", "auto"] | None = "on"
    """``-fa``."""
    cache_type_k: Literal["f32", "f16", "bf16", "q8_0", "q4_0", "q4_1", "iq4_nl", "q5_0",
                          "q5_1"] | None = None
    """``-ctk``: K cache type."""
    cache_type_v: Literal["f32", "f16", "bf16", "q8_0", "q4_0", "q4_1", "iq4_nl", "q5_0",
                          "q5_1"] | None = None
    """``-ctv``: V cache type (quantized V needs flash attention)."""
    batch_size: int | None = Field(None, ge=1)
    """``-b``: logical batch."""
    ubatch_size: int | None = Field(None, ge=1)
    """``-ub``: physical batch."""
    jinja: bool | None = True
    """Use the model's Jinja chat template."""
    reasoning_budget: int | None = Field(None, ge=-1)
    """``--reasoning-budget``: -1 unrestricted, 0 off."""
    host: SafeToken = "0.0.0.0"
    """Address to bind."""
    metrics: bool = True
    """Expose ``/metrics``."""
    log_verbosity: int | None = Field(4, ge=0, le=5)
    """``-lv N``. Current ``llama-server`` logs its KV buffer, device, offloaded layers,
    build and flash-attention decision only at 4 (its default, 3, prints a handful of
    lines), and no endpoint tells the KV size: the health gate reads them from the log.
    ``null`` leaves the engine's default."""
    cache_prompt: bool | None = None
    """``--no-cache-prompt`` when false (needed for bit-exact determinism)."""
    seed: int | None = None
    """Default sampling seed."""
    extra_args: list[Text] = Field(default_factory=list)
    """Escape hatch, as for vLLM."""

    @field_validator("extra_args")
    @classmethod
    def _extra_args_are_flags(cls, args: list[str]) -> list[str]:
        return VllmSettings._extra_args_are_flags(args)


class PatchOverlay(StrictModel):
    """A source patch applied to the engine's installed Python package at image build."""

    file: SafeToken | None = None
    """Diff file, relative to the profiles folder (e.g. ``patches/pr40798.diff``)."""
    url: SafeToken | None = None
    """Or a URL to fetch at build time (``https://github.com/…/pull/N.diff``)."""
    sha256: Sha256Hex
    """Expected sha256 of the diff; a mismatch fails the render (file) or build (URL)."""
    target: SafeToken = "vllm"
    """Installed package the paths are relative to."""
    strip: int = Field(1, ge=0, le=5)
    """``-p`` strip level for ``git apply``."""
    pr: int | None = Field(None, ge=1)
    """Upstream PR number, for humans and rules (e.g. 40798)."""
    provides: list[SafeToken] = Field(default_factory=list)
    """Capabilities this patch adds, used by rules (e.g. ``turboquant-workspace-reservation``,
    ``turboquant-hybrid``, ``fp8-lm-head-dispatch``)."""

    @model_validator(mode="after")
    def _file_or_url(self) -> PatchOverlay:
        if (self.file is None) == (self.url is None):
            raise ValueError("give exactly one of 'file' or 'url'")
        if self.file is not None and (self.file.startswith("/") or ".." in self.file):
            raise ValueError("'file' must be relative to the profiles folder, without '..'")
        if self.url is not None and not self.url.startswith("https://"):
            raise ValueError("'url' must start with https://")
        return self


ENGINE_SETTINGS: dict[str, tuple[str, type[StrictModel] | None]] = {
    "vllm": ("vllm", VllmSettings),
    "llama.cpp": ("llamacpp", None),
}
"""Each engine's settings field, and the settings it gets when the profile gives none
(``None``: the profile must give them). The models cannot import the engine registry
(:mod:`servefleet.core.engines` builds on them), so this table stays here."""


class Profile(StrictModel):
    """A resolved serving profile (after ``extends``)."""

    name: Name
    """Profile name; equals the file name without ``.yaml``."""
    description: SingleLine = ""
    """One line for humans."""
    extends: Name | None = None
    """The profile this one inherits from (already merged in)."""
    engine: Engine
    """``vllm`` or ``llama.cpp``."""
    engine_version: SafeToken
    """Engine version inside the image (``0.21.0``, ``0.19.1rc1.dev328``, ``b8680``)."""
    image: ImageRef
    """Pinned base image."""
    model: ModelSpec
    """The model and its facts."""
    vllm: VllmSettings | None = None
    """vLLM flags (engine ``vllm``)."""
    llamacpp: LlamaCppSettings | None = None
    """llama-server flags (engine ``llama.cpp``)."""
    env: dict[Text, SingleLine] = Field(default_factory=dict)
    """Environment of the engine container (non-secret)."""
    secret_env: list[Text] = Field(default_factory=list)
    """Names of secret variables (values come from the stack's secrets, only into the
    node's 0600 env file)."""
    patches: list[PatchOverlay] = Field(default_factory=list)
    """Source overlays, applied in order at image build."""
    pip_packages: list[Text] = Field(default_factory=list)
    """Extra pip requirements installed into the image (``name==version``)."""
    health: HealthExpectations = Field(default_factory=HealthExpectations)
    """Health expectations."""
    shm_size: SafeToken | None = None
    """Shared memory when ``ipc: host`` is not wanted; ``None`` = ``ipc: host``."""

    @field_validator("env", "secret_env")
    @classmethod
    def _env_names(cls, names: _EnvNames) -> _EnvNames:
        # The keys of ``env``, the items of ``secret_env``: both name variables.
        for key in names:
            if not ENV_NAME_RE.match(key):
                raise ValueError(f"{key!r} is not an environment variable name (A-Z, 0-9, _)")
        return names

    @field_validator("pip_packages")
    @classmethod
    def _pip_reqs(cls, reqs: list[str]) -> list[str]:
        for req in reqs:
            if not PIP_REQ_RE.match(req):
                raise ValueError(f"{req!r} is not a pip requirement like 'name==1.2.3'")
        return reqs

    @model_validator(mode="after")
    def _engine_settings_match(self) -> Profile:
        own, default = ENGINE_SETTINGS[self.engine]
        for engine, (field, _) in ENGINE_SETTINGS.items():
            if engine != self.engine and getattr(self, field) is not None:
                raise ValueError(f"engine is {self.engine} but {field!r} settings are given")
        if getattr(self, own) is None:
            if default is None:
                raise ValueError(f"engine {self.engine} needs {own!r} settings (at least gguf)")
            object.__setattr__(self, own, default())
        overlap = set(self.env) & set(self.secret_env)
        if overlap:
            raise ValueError(f"{sorted(overlap)} are in both env and secret_env")
        return self

    def needs_secret(self, name: str) -> bool:
        """Whether a deploy must have ``name`` (from ``secret_env``): every secret but a
        hub token of a public model (:data:`HUB_TOKEN_SECRETS`, ``model.gated``)."""
        return self.model.gated or name not in HUB_TOKEN_SECRETS

    @property
    def version(self) -> tuple[int, ...]:
        """The engine version as a comparable tuple."""
        return version_tuple(self.engine_version)

    @property
    def builds_image(self) -> bool:
        """Whether a Dockerfile overlay is needed (patches or pip packages)."""
        return bool(self.patches or self.pip_packages)

    @property
    def speculative(self) -> SpeculativeConfig | None:
        """The speculative-decoding settings, if any."""
        settings = self.vllm  # only vLLM speculates here
        return settings.speculative if settings is not None else None

    def patch_provides(self, capability: str) -> bool:
        """Whether some patch overlay declares ``capability``."""
        return any(capability in p.provides for p in self.patches)
