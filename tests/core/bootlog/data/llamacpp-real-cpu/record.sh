set -u
S=/root/.cache/servefleet/engines/llama.cpp/b11434-d7941d18aa5a/bin/llama-server; M=/root/.cache/servefleet/engines/llama.cpp/b11434-d7941d18aa5a/models/qwen35moe-tiny.gguf; R=tests/core/bootlog/data/llamacpp-real-cpu
serve() { n=$1; p=$2; shift 2
  $S -m $M --host 127.0.0.1 --port $p -t 2 "$@" > $R/$n.log 2>&1 & pid=$!
  for i in $(seq 1 120); do curl -sf http://127.0.0.1:$p/health >/dev/null && break; kill -0 $pid 2>/dev/null || break; sleep 0.25; done
  if [ "$n" = cpu-default ]; then for e in props slots; do curl -s http://127.0.0.1:$p/$e > $R/$n.$e.json; done; fi
  curl -s -H 'Content-Type: application/json' -d '{"messages":[{"role":"user","content":"Say hi"}],"max_tokens":8,"temperature":0}' http://127.0.0.1:$p/v1/chat/completions > $R/$n.chat.json
  if [ "$n" = cpu-default ]; then curl -s http://127.0.0.1:$p/metrics > $R/$n.metrics.txt; fi
  kill -TERM $pid; wait $pid; echo "$n exit=$?"
}
serve cpu-default 18081 --metrics
serve cpu-fa-on 18082 --metrics -fa on
serve cpu-fa-off 18083 --metrics -fa off
serve cpu-kv-q8 18084 --metrics -fa on -ctk q8_0 -ctv q8_0
serve cpu-lv4 18085 --metrics -lv 4
$S -m $M --port 18086 --no-such-flag > $R/cpu-bad-flag.log 2>&1; echo "bad-flag exit=$?"
$S -m /nonexistent/model.gguf --port 18086 > $R/cpu-missing-model.log 2>&1; echo "missing-model exit=$?"
(ulimit -v 4000000; timeout 60 $S -m $M --port 18087 -t 2 -c 50000000 -fit off > $R/cpu-kv-alloc.log 2>&1; echo "kv-alloc exit=$?")
(ulimit -v 4000000; timeout 60 $S -m $M --port 18087 -t 2 -c 50000000 > $R/cpu-kv-alloc-fit.log 2>&1; echo "kv-alloc-fit exit=$?")
$S -m $M --host 127.0.0.1 --port 18088 -t 2 > $R/cpu-killed.log 2>&1 & kp=$!
for i in $(seq 1 120); do curl -sf http://127.0.0.1:18088/health >/dev/null && break; sleep 0.25; done
kill -KILL $kp; wait $kp; echo "killed exit=$?"
