#!/bin/bash
# Lay out the slimmed vLLM 0.26.0 install and the tiny model on the GPU machine.
# The install travels as pkg.tar.xz (sha256 below) split in three pieces, .vg1/.vg2/.vg3
# in the repository root (not committed), one piece per transfer to the machine; each run
# stashes its piece in /tmp/p, and the run that finds all three unpacks them into
# /tmp/site and copies the model to /tmp/sf/models/qwen3-moe-tiny.
# With INFO=1 it first writes what the machine is to $OUT/machine.txt.
PKG_SHA256=bd27a8676e2982210640382261cf88afda78dd74d85597af99536ec73859799a
mkdir -p /tmp/p
for d in .vg1 .vg2 .vg3; do
  [ -d "$d" ] && cp -n "$d"/pkg.tar.xz.part-* /tmp/p/ 2>/dev/null
  [ -d "$d/model" ] && mkdir -p /tmp/sf/models && cp -rn "$d/model" /tmp/sf/models/qwen3-moe-tiny
done
ls -la /tmp/p
if [ "${INFO:-0}" = 1 ]; then
  {
    date -u; uname -a; nproc; free -g; df -h /tmp
    nvidia-smi
    nvidia-smi --query-gpu=name,driver_version,memory.total,pci.bus_id,compute_cap --format=csv
    nvidia-smi topo -m
    command -v nvcc && nvcc --version
    command -v gcc && gcc --version | head -1
    command -v python3; python3 --version
    python3 -c 'import torch, triton; print("torch", torch.__version__, "cuda", torch.version.cuda, "nccl", torch.cuda.nccl.version(), "triton", triton.__version__, torch.cuda.get_device_name(0), torch.cuda.get_device_capability(0))'
    python3 -m pip list 2>/dev/null | grep -iE '^(numba|numpy|llvmlite|triton|transformers|tokenizers|torch|huggingface|safetensors|uvloop|aiohttp|protobuf|pillow|opencv) '
    env | grep -E '^(PATH|LD_LIBRARY_PATH|CUDA|NCCL|TORCH|NVSHMEM|VLLM|HF_|HOME=)' | sort
  } > "$OUT/machine.txt" 2>&1
  cat "$OUT/machine.txt"
fi
n=$(ls /tmp/p/pkg.tar.xz.part-* 2>/dev/null | wc -l)
if [ "$n" = 3 ] && [ ! -x /tmp/site/bin/vllm ]; then
  echo "$PKG_SHA256  -" > /tmp/p/sum
  cat /tmp/p/pkg.tar.xz.part-* | tee >(sha256sum -c /tmp/p/sum >&2) | xz -d -T16 | { mkdir -p /tmp/site && tar -x -C /tmp/site; } || exit 1
  mkdir -p /tmp/site/bin
  # The console script pip writes for vllm's entry point (vllm.entrypoints.cli.main:main).
  printf '#!%s\n# -*- coding: utf-8 -*-\nimport re\nimport sys\nfrom vllm.entrypoints.cli.main import main\nif __name__ == "__main__":\n    sys.argv[0] = re.sub(r"(-script\\.pyw|\\.exe)?$", "", sys.argv[0])\n    sys.exit(main())\n' "$(command -v python3)" > /tmp/site/bin/vllm
  chmod +x /tmp/site/bin/vllm
  cat /tmp/site/bin/vllm
  du -sh /tmp/site; ls /tmp/sf/models/qwen3-moe-tiny
fi
