#!/usr/bin/env bash
# setup.sh - install what tern needs on Debian 12, build it, and run the main
# job on the embedded default model. Run as root (or with sudo available).
set -euo pipefail
cd "$(dirname "$0")/.."
SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
APT_PKGS="build-essential cmake pkg-config clang libclang-rt-14-dev libcjson-dev libutf8proc-dev libpcre2-dev libedit-dev libmicrohttpd-dev gcc-aarch64-linux-gnu libc6-dev-arm64-cross qemu-user tmux python3 python3-dev python3-pip python3-venv chromium chromium-driver python3-selenium libjs-marked libjs-highlight.js"
missing=""
for p in $APT_PKGS; do dpkg -s "$p" >/dev/null 2>&1 || missing="$missing $p"; done
if [ -n "$missing" ]; then
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq $missing
fi
# Python is for tools and test oracles only (never needed to run tern).
python3 -m pip install -q -r tools/requirements.txt 2>/dev/null || \
  python3 -m pip install -q --break-system-packages -r tools/requirements.txt
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j"$(nproc)"
# The Python package `tern` (python/, docs/python.md): its extension links build/libtern.a.
# Installed into the system Python like the tools above (a venv works the same way).
pyinst() { python3 -m pip install -q "$@" 2>/dev/null || python3 -m pip install -q --break-system-packages "$@"; }
pyinst -r python/requirements-test.txt
pyinst ./python
if [ "${TERN_SETUP_NO_RUN:-0}" != 1 ]; then
  # The embedded model (models/tern-default.gguf) was trained on Linux and Python
  # documentation as plain text: a raw completion shows what it does best.
  ./build/tern run --raw -p "${TERN_SETUP_PROMPT:-To build the kernel module, run}" -n 64
fi
