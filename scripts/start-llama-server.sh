#!/usr/bin/env bash
# Serve a real continuous-batching engine on this machine, no GPU and no download from a hub:
#   - builds llama.cpp's llama-server from the source vendored in the llama-cpp-python sdist
#     (from the package registry; about 10 minutes on 2 cores, once: the build is cached);
#   - writes a small llama model with random weights (scripts/tiny_gguf.py, the gguf package);
#   - serves it with 8 parallel slots on 127.0.0.1:$SIMROLLOUT_LLAMA_PORT (8089) and waits for it.
# Prints the base URL. Stop it with: pkill -f simrollout-tiny.gguf
set -euo pipefail
cd "$(dirname "$0")/.."
DIR="${SIMROLLOUT_LLAMA_DIR:-$HOME/.cache/simrollout/llama}"
PORT="${SIMROLLOUT_LLAMA_PORT:-8089}"
VERSION=0.3.36  # llama-cpp-python release whose vendored llama.cpp was checked
BIN="$DIR/build/bin/llama-server"
MODEL="$DIR/simrollout-tiny.gguf"

if curl -sf "http://127.0.0.1:$PORT/health" >/dev/null 2>&1; then
  echo "http://127.0.0.1:$PORT/v1"; exit 0
fi
if [ ! -x "$BIN" ]; then
  if ! command -v cmake >/dev/null 2>&1 || ! command -v g++ >/dev/null 2>&1; then
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq && apt-get install -y -qq cmake g++ make >/dev/null
  fi
  mkdir -p "$DIR/src"
  python -m pip download --quiet --no-deps --no-binary :all: "llama-cpp-python==$VERSION" -d "$DIR/src"
  tar xzf "$DIR/src/llama_cpp_python-$VERSION.tar.gz" -C "$DIR/src"
  cmake -S "$DIR/src/llama_cpp_python-$VERSION/vendor/llama.cpp" -B "$DIR/build" -DLLAMA_BUILD_SERVER=ON \
    -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DCMAKE_BUILD_TYPE=Release >"$DIR/cmake.log"
  cmake --build "$DIR/build" --target llama-server -j "$(nproc)" >"$DIR/build.log"
fi
[ -f "$MODEL" ] || python scripts/tiny_gguf.py "$MODEL"
nohup env LD_LIBRARY_PATH="$DIR/build/bin" "$BIN" -m "$MODEL" --host 127.0.0.1 --port "$PORT" \
  -c 16384 -np 8 -t "$(nproc)" --cache-ram 0 >"$DIR/server.log" 2>&1 &
for _ in $(seq 1 120); do
  curl -sf "http://127.0.0.1:$PORT/health" >/dev/null 2>&1 && break
  sleep 1
done
curl -sf "http://127.0.0.1:$PORT/health" >/dev/null || { echo "llama-server did not start; see $DIR/server.log" >&2; exit 1; }
echo "http://127.0.0.1:$PORT/v1"
