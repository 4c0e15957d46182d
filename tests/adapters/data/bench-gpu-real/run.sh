#!/bin/bash
# Run servefleet's bench load program (servefleet/adapters/bench/load.py, unchanged) against
# a real vLLM 0.26.0 `vllm serve` on a GPU machine: the seeds' A-D shapes, a replayed trace,
# and n-gram speculative decoding for the acceptance figures. The install and the tiny model
# are laid out by ../../../core/bootlog/data/vllm-gpu-real/setup.sh (three runs, one piece
# each); this script does nothing until the install is there. PART=seeds runs A-D, PART=rest
# the trace file replayed as it is and n-gram, PART=replay the trace as servefleet sends it; the outputs are packed into $OUT/bench-gpu-real-$PART.tar.gz.
set -u
bash tests/core/bootlog/data/vllm-gpu-real/setup.sh > /dev/null 2>&1
[ -x /tmp/site/bin/vllm ] || { echo "install not complete yet"; ls /tmp/p; exit 0; }
export PATH=/tmp/site/bin:$PATH PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1 \
  VLLM_USE_FLASHINFER_SAMPLER=0 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 \
  VLLM_NO_USAGE_STATS=1 DO_NOT_TRACK=1
MODEL=/tmp/sf/models/qwen3-moe-tiny
PORT=18300
LOAD=servefleet/adapters/bench/load.py
PART=${PART:-seeds}
W=/tmp/bench-out-$PART
mkdir -p "$W"
trap 'tar -czf "$OUT/bench-gpu-real-$PART.tar.gz" -C "$W" .' EXIT

serve() {  # name, extra args...
  local name=$1; shift
  vllm serve "$MODEL" --served-model-name qwen36 --max-model-len 16384 --host 127.0.0.1 \
    --port $PORT "$@" > "$W/$name.serve.log" 2>&1 &
  SERVER=$!
  for _ in $(seq 1 400); do
    curl -sf "http://127.0.0.1:$PORT/health" > /dev/null && return 0
    kill -0 $SERVER 2>/dev/null || return 1
    sleep 0.5
  done
  return 1
}

stop() { kill -TERM $SERVER; wait $SERVER; }

job() {  # name seed input output concurrency prompts warmups [trace]
  local j
  j=$(python3 - "$@" <<'PY'
import json, os, sys, gzip, base64
name, seed, i, o, c, p, w = sys.argv[1:8]
job = {"base_url": "http://127.0.0.1:18300", "seed": int(seed), "input_len": int(i),
       "output_len": int(o), "concurrency": int(c), "prompts": int(p), "warmups": int(w),
       "kv_gauges": ["vllm:kv_cache_usage_perc"], "texts": False,
       "backend": "openai", "endpoint": "/v1/completions"}
if len(sys.argv) > 8:
    # As servefleet sends it: checked, every prompt covered by its blocks (RAW=1: the file
    # as it is, to see what vLLM does with blocks that cover less than the prompt).
    if os.environ.get("RAW") == "1":
        text = open(sys.argv[8], "rb").read()
    else:
        from pathlib import Path
        sys.path.insert(0, os.getcwd())
        from servefleet.core.bench.trace import read_trace
        text = read_trace(Path(sys.argv[8]), sys.argv[8]).text.encode()
    job.update(trace=base64.b64encode(gzip.compress(text, mtime=0)).decode(),
               time_scale=0.001, block_tokens=16)
print(json.dumps(job))
PY
)
  local t0=$SECONDS
  python3 "$LOAD" "$j" > "$W/$1-seed$2.out" 2>&1
  echo "$1 seed $2: exit $? in $((SECONDS - t0)) s"
}

nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader > "$W/machine.txt"
if serve default; then
  if [ "$PART" = seeds ]; then
    for seed in 42 123; do
      job A $seed 512 512 1 8 3
      job B $seed 8192 256 4 16 3
      job C $seed 2048 512 16 64 3
      job D $seed 2048 256 2 16 3
    done
  elif [ "$PART" = replay ]; then
    job R 42 0 0 8 24 3 scenarios/chat-mix.jsonl
  else
    export RAW=1
    job R 42 0 0 8 24 3 scenarios/chat-mix.jsonl
  fi
  stop
else
  echo "default boot failed"; tail -20 "$W/default.serve.log"
fi
[ "$PART" = rest ] && if serve ngram --speculative-config '{"method":"ngram","num_speculative_tokens":2,"prompt_lookup_max":3}'; then
  job C-ngram 42 2048 512 16 64 3
  stop
else
  echo "ngram boot failed"; tail -20 "$W/ngram.serve.log"
fi
grep -h "@@bench-result\|@@bench-error" "$W"/*.out | cut -c1-300
