"""Build context of the simulated nodes' stand-in engine images.

``Dockerfile.vllm`` and ``Dockerfile.llamacpp`` take ``--build-arg BASE_IMAGE=<python
base>`` and this folder as context. The engine itself is ``standin_engine`` (stdlib-only,
independent of servefleet); ``placeholder-vllm/vllm`` is the ``vllm`` package the vLLM
image carries so patch overlays apply for real.
"""

from pathlib import Path

CONTEXT_DIR = Path(__file__).resolve().parent
"""The Docker build context (this folder)."""

DOCKERFILES = {
    "vllm": CONTEXT_DIR / "Dockerfile.vllm",
    "llama.cpp": CONTEXT_DIR / "Dockerfile.llamacpp",
}
"""Dockerfile of each engine's stand-in image."""

PLACEHOLDER_VLLM_DIR = CONTEXT_DIR / "placeholder-vllm"
"""Folder holding the placeholder ``vllm`` package (what dist-packages holds in the image)."""

ENGINE_DIR = CONTEXT_DIR / "standin_engine"
"""The engine package (run it with ``python3 -m standin_engine`` from ``CONTEXT_DIR``)."""
