"""Node inventory: one YAML file per machine under ``nodes/``."""

from __future__ import annotations

import ipaddress
import re
from typing import TYPE_CHECKING, Any, Literal

from pydantic import Field, field_validator, model_validator

from servefleet.core.gpu.known import TABLE_SOURCE_PREFIX, known_gpu
from servefleet.core.hostkeys import normalize_host_key
from servefleet.core.models.common import (
    AbsPath,
    Name,
    SafeToken,
    SingleLine,
    StrictModel,
    Text,
)

if TYPE_CHECKING:
    from servefleet.core.gpu import ExpectedGpuFacts

HOST_LABEL_RE = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?\Z")
OVERRIDE_PATH_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9._-]*(?:/[A-Za-z0-9_][A-Za-z0-9._-]*)*\Z")
COMPUTE_CAPABILITY_RE = re.compile(r"^\d{1,2}\.\d\Z")


class SshSettings(StrictModel):
    """How servefleet reaches the node over SSH."""

    user: SafeToken = "root"
    """Remote user that owns the base directory and may run ``docker``."""
    port: int = Field(22, ge=1, le=65535)
    """TCP port of the node's sshd."""
    identity_file: AbsPath | None = None
    """Private key file on the control machine; leave empty to use the SSH agent."""
    agent: bool = False
    """Use keys from a running ssh-agent (``SSH_AUTH_SOCK``)."""
    host_keys: list[Text] = Field(default_factory=list)
    """Pinned host public keys (``ssh-ed25519 AAAA…``; a line as ``ssh-keyscan`` prints it,
    host name first, is taken as it is). A node presenting any other key is refused; there
    is no trust-on-first-use."""
    connect_timeout_seconds: float = Field(10.0, gt=0, le=300)
    """Give up connecting after this many seconds (retried with backoff)."""
    authorized_keys: AbsPath | None = None
    """The file this user's sshd reads keys from, when it is not ``~/.ssh/authorized_keys``:
    a neighbour copying staged weights from this node gets a short-lived key there."""

    @field_validator("host_keys")
    @classmethod
    def _host_keys_are_openssh_lines(cls, keys: list[str]) -> list[str]:
        return [normalize_host_key(key) for key in keys]

    @model_validator(mode="after")
    def _some_way_to_authenticate(self) -> SshSettings:
        if self.identity_file is None and not self.agent:
            raise ValueError("set ssh.identity_file or ssh.agent: true")
        return self


class Gpu(StrictModel):
    """One kind of GPU in the node (``count`` identical devices)."""

    name: SingleLine
    """Device name as NVML reports it, e.g. ``NVIDIA GB10``."""
    count: int = Field(1, ge=1, le=64)
    """How many of these GPUs the node has."""
    memory_gib: float = Field(gt=0, le=4096)
    """Memory per device in GiB (for unified-memory devices: the shared pool)."""
    unified_memory: bool = False
    """CPU and GPU share one memory pool (GB10, Jetson): vLLM then measures free memory
    from the host, and the OS, page cache and other containers compete for it."""
    compute_capability: Text
    """CUDA compute capability as ``major.minor`` (GB10: ``12.1``; RTX 5090: ``12.0``)."""
    cuda_memory_gib: float | None = Field(None, gt=0, le=4096)
    """Memory per device as CUDA reports it (``torch.cuda.mem_get_info()`` total), which
    vLLM multiplies by ``gpu_memory_utilization``: a GB10 reports 121.69 GiB of its 128 GB,
    an RTX 5090 31.37 GiB. Empty: ``memory_gib`` is taken as it is."""
    boot_free_gib: float | None = Field(None, gt=0, le=4096)
    """The most memory CUDA reports free when an engine starts (on unified memory: what the
    host can free). vLLM refuses to start when ``utilization × cuda_memory_gib`` exceeds it:
    a GB10 frees 101.3–102.2 GiB at boot. Empty: not checked."""
    memory_source: SingleLine | None = None
    """Where ``cuda_memory_gib`` and ``boot_free_gib`` come from (a probe of the node, a
    public report): shown in every message that uses them."""

    @model_validator(mode="before")
    @classmethod
    def _known_gpu_figures(cls, data: Any) -> Any:
        """A GPU of :data:`~servefleet.core.gpu.known.KNOWN_GPUS` written without CUDA's
        figures gets them from the table (``memory_source`` says so): a node file with only
        the box's memory is planned from what CUDA reports, not from the box."""
        if not isinstance(data, dict) or not isinstance(data.get("name"), str):
            return data
        row = known_gpu(data["name"])
        if row is None or data.get("cuda_memory_gib") is not None:
            return data
        memory = data.get("memory_gib")
        if isinstance(memory, (int, float)) and row.cuda_memory_gib > memory * 1.01:
            return data  # less than the table's: a slice of the device, said as it is
        filled = {**data, "cuda_memory_gib": row.cuda_memory_gib}
        filled.setdefault("unified_memory", row.unified_memory)
        if row.boot_free_gib is not None and data.get("boot_free_gib") is None:
            filled["boot_free_gib"] = row.boot_free_gib
        if data.get("memory_source") is None:
            filled["memory_source"] = TABLE_SOURCE_PREFIX + row.source
        return filled

    @field_validator("compute_capability")
    @classmethod
    def _cc_format(cls, value: str) -> str:
        if not COMPUTE_CAPABILITY_RE.match(value):
            raise ValueError(f"{value!r} is not a compute capability like '12.1'")
        return value

    @model_validator(mode="after")
    def _cuda_memory_within_device(self) -> Gpu:
        if self.cuda_memory_gib is not None and self.cuda_memory_gib > self.memory_gib * 1.01:
            raise ValueError(f"cuda_memory_gib {self.cuda_memory_gib:g} is more than the "
                             f"device's memory_gib {self.memory_gib:g}; CUDA never reports "
                             "more than the device has (set it from `servefleet probe`)")
        if self.boot_free_gib is not None and self.boot_free_gib > self.cuda_total_gib:
            raise ValueError(f"boot_free_gib {self.boot_free_gib:g} is more than the "
                             f"{self.cuda_total_gib:g} GiB CUDA reports in total; it is the "
                             "free memory at boot, at most the total")
        return self

    @property
    def cuda_total_gib(self) -> float:
        """The memory vLLM sizes against (``cuda_memory_gib``, else ``memory_gib``): the one
        value every memory calculation reads."""
        return self.cuda_memory_gib if self.cuda_memory_gib is not None else self.memory_gib

    def memory_basis(self) -> str:
        """``121.69 GiB as CUDA reports it (source)`` for messages."""
        if self.cuda_memory_gib is None:
            return f"{self.memory_gib:g} GiB (memory_gib; cuda_memory_gib not set)"
        source = f"; {self.memory_source}" if self.memory_source else ""
        return f"{self.cuda_memory_gib:g} GiB as CUDA reports it{source}"

    @property
    def sm(self) -> tuple[int, int]:
        """The compute capability as a comparable tuple, e.g. ``(12, 1)``."""
        major, minor = self.compute_capability.split(".")
        return int(major), int(minor)


UnshownFact = Literal["cudagraph_mode", "attention_backend", "kv_smaller_than",
                      "kv_cache_dtype", "predicted_kv_cache_tokens"]
"""Boot facts a substituted engine cannot show (a CPU build has no CUDA graphs)."""


class SimEngine(StrictModel):
    """The engine that really runs on a simulated node in place of a profile's engine: a CPU
    build of the same engine, written by ``servefleet sim up`` (``servefleet.sim.engines``
    holds what it is and why each difference exists)."""

    version: SafeToken
    """Version the engine reports (``/version``, ``/props`` build), whatever the profile pins."""
    device: Literal["cpu"] = "cpu"
    """Where it computes."""
    unshown: list[UnshownFact] = Field(default_factory=list)
    """Boot facts it cannot show; the health gate and drift do not expect them."""
    why: SingleLine
    """One line for the health notes: what runs instead and why."""
    fp8_kv_cache: bool = True
    """The CPU build keeps an FP8 KV cache on this machine (x86 with AVX-512 or AMX); where
    it cannot, the node's engine runs an FP8 profile with the model dtype's KV cache
    (``servefleet/sim/engines/cpu_twin.py`` says so in the boot log)."""


class SimSettings(StrictModel):
    """Present only on simulated nodes: where the test bed controls the node."""

    control_dir: AbsPath
    """Folder mounted into the stand-in engine; fault markers and the GPU readout live here."""
    engines: dict[Literal["vllm", "llama.cpp"], SimEngine] = Field(default_factory=dict)
    """Engines that run for real (a CPU build) on this node; others run as the stand-in."""


class FastLink(StrictModel):
    """The node's fast interconnect to its peers (DGX Spark: the ConnectX-7 port), used by an
    engine spanning several nodes for NCCL, Gloo and torch.distributed traffic."""

    interface: SafeToken
    """Network interface on that link (``enp1s0f1np1``): ``NCCL_SOCKET_IFNAME``,
    ``GLOO_SOCKET_IFNAME``, ``TP_SOCKET_IFNAME`` and ``UCX_NET_DEVICES``."""
    address: Text
    """This node's IP address on that link (``VLLM_HOST_IP``; the head's is the
    ``--master-addr`` of every rank)."""
    ib_hcas: list[SafeToken] = Field(default_factory=list)
    """RDMA devices of the link (``rocep1s0f1``, ``roceP2p1s0f1``: both halves of the
    ConnectX-7) for ``NCCL_IB_HCA``; empty = no RDMA, NCCL falls back to sockets."""

    @field_validator("address")
    @classmethod
    def _address_is_ip(cls, value: str) -> str:
        try:
            ipaddress.ip_address(value)
        except ValueError:
            raise ValueError(f"{value[:60]!r} is not an IP address; write this node's "
                             "address on the fast link (ip -br addr show IFACE)") from None
        return value


class Node(StrictModel):
    """One machine of the fleet."""

    name: Name
    """Node name; must equal the file name without ``.yaml``."""
    address: Text
    """Host name or IP address servefleet connects to (an IPv6 literal without brackets)."""
    ssh: SshSettings
    """SSH connection settings."""
    arch: Literal["x86_64", "aarch64"]
    """CPU architecture (``uname -m``); DGX Spark is ``aarch64``."""
    gpus: list[Gpu] = Field(min_length=1)
    """The node's GPUs."""
    host_memory_gib: float | None = Field(None, gt=0)
    """System RAM in GiB; for unified-memory nodes the same pool as the GPU's."""
    driver_version: SafeToken | None = None
    """Expected NVIDIA driver version (e.g. ``580.142``); drift checks compare against it."""
    cuda_version: SafeToken | None = None
    """Expected CUDA driver version (e.g. ``13.0``)."""
    base_dir: AbsPath = "/srv/servefleet"
    """Folder on the node that holds every deployment's releases."""
    hf_cache: AbsPath = "/root/.cache/huggingface"
    """Hugging Face cache folder on the node, mounted into engines."""
    models_dir: AbsPath | None = None
    """Folder on the node with local model files (GGUF), mounted read-only at ``/models``."""
    hf_endpoint: Text | None = None
    """Hugging Face endpoint the node stages weights from (``HF_ENDPOINT``: a mirror, or a
    local hub); ``None`` = huggingface.co."""
    ports: list[int] = Field(default_factory=lambda: [8000])
    """Ports engines on this node may listen on."""
    compose_overrides: list[Text] = Field(default_factory=list)
    """Node-local compose override files applied after the rendered compose file, in order:
    paths relative to the project folder, inside it (a symlink may not lead out). Files
    ending in ``.j2`` are rendered with the deployment's facts first."""
    labels: dict[SafeToken, SingleLine] = Field(default_factory=dict)
    """Free-form labels (rack, owner, …), copied onto the containers."""
    fast_link: FastLink | None = None
    """The fast interconnect to peer nodes, for engines spanning nodes; ``None`` = none."""
    simulated: bool = False
    """True for nodes of the local simulated fleet (see ``servefleet.sim``)."""
    sim: SimSettings | None = None
    """Test-bed settings; only on simulated nodes."""

    @field_validator("ports")
    @classmethod
    def _ports_valid(cls, ports: list[int]) -> list[int]:
        for port in ports:
            if not 1 <= port <= 65535:
                raise ValueError(f"port {port} is outside 1-65535")
        if len(set(ports)) != len(ports):
            raise ValueError("ports are listed twice")
        return ports

    @field_validator("hf_endpoint")
    @classmethod
    def _endpoint_url(cls, value: str | None) -> str | None:
        if value is not None and not re.match(r"^https?://[A-Za-z0-9.:\[\]_-]+(?:/[^\s]*)?\Z",
                                              value):
            raise ValueError(f"{value!r} is not an http(s):// URL like "
                             "'https://hf-mirror.example.com'")
        return value

    @field_validator("address")
    @classmethod
    def _address_is_host_or_ip(cls, value: str) -> str:
        # The address reaches ssh-keyscan suggestions and the SSH transport; '-oProxyCommand=…'
        # would be read as an option, so only a host name or an IP literal is accepted.
        try:
            ipaddress.ip_address(value)
            return value
        except ValueError:
            pass
        labels = value.removesuffix(".").split(".")
        if len(value) > 253 or not all(HOST_LABEL_RE.match(label) for label in labels):
            raise ValueError(
                f"{value[:60]!r} is neither a host name (letters, digits, '-' and '.', no "
                "leading '-') nor an IP address; write the node's DNS name or IP"
            )
        return value

    @field_validator("compose_overrides")
    @classmethod
    def _overrides_stay_inside(cls, paths: list[str]) -> list[str]:
        # Render copies these files into the release (mode 0644, shipped to the node): an
        # absolute path or '..' could copy any file of the control machine, /etc/shadow
        # included. Symlinks leading out of the project are refused when rendering.
        for index, path in enumerate(paths):
            if not OVERRIDE_PATH_RE.match(path) or ".." in path.split("/"):
                raise ValueError(
                    f"[{index}] {path[:60]!r} must be a path relative to the project folder "
                    "(letters, digits, '.', '_', '-' and '/', no '..', not absolute); move "
                    "the file into the project, e.g. nodes/overrides/NAME.yaml"
                )
        return paths

    @model_validator(mode="after")
    def _sim_settings_only_on_sim_nodes(self) -> Node:
        if self.sim is not None and not self.simulated:
            raise ValueError("'sim' settings are only allowed with simulated: true")
        return self

    @property
    def gpu_count(self) -> int:
        """Total number of GPUs on the node."""
        return sum(g.count for g in self.gpus)

    @property
    def primary_gpu(self) -> Gpu:
        """The first GPU kind; fleets here have one kind per node."""
        return self.gpus[0]

    @property
    def unified_memory(self) -> bool:
        """Whether the node's GPU shares memory with the host."""
        return any(g.unified_memory for g in self.gpus)

    def expected_gpu_facts(self) -> ExpectedGpuFacts:
        """What the inventory promises about GPUs, driver, CUDA and CPU, for probe checks."""
        from servefleet.core.gpu import ExpectedGpu, ExpectedGpuFacts

        return ExpectedGpuFacts(
            gpus=tuple(
                ExpectedGpu(name=g.name, count=g.count, memory_gib=g.memory_gib,
                            cuda_memory_gib=g.cuda_memory_gib,
                            unified_memory=g.unified_memory,
                            compute_capability=g.compute_capability)
                for g in self.gpus
            ),
            driver_version=self.driver_version,
            cuda_version=self.cuda_version,
            arch=self.arch,
        )
