#!/usr/bin/env bash
# fetch_corpus.sh - download and unpack the two Debian packages the default
# model is trained on (English technical prose, see docs/default-model.md):
#   linux-doc-6.1   the Linux kernel's Documentation/ (GPL-2.0), reST sources
#   python3.11-doc  the Python 3.11 documentation (PSF License 2.0), reST sources
# Usage: bash tools/train_default/fetch_corpus.sh [DIR]   (default tools/train_default/work/debs)
# Needs apt (Debian 12 "bookworm" sources); runs apt-get download, so no root
# install happens: the .deb files are only unpacked with dpkg -x into DIR.
set -euo pipefail
dir=${1:-"$(dirname "$0")/work/debs"}
mkdir -p "$dir"
cd "$dir"
apt-get download linux-doc-6.1 python3.11-doc
for f in linux-doc-6.1_*.deb python3.11-doc_*.deb; do
  dpkg -x "$f" root
done
ls -la *.deb
