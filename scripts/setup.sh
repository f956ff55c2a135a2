#!/usr/bin/env bash
# Installs everything hypertrain needs to build, test and run its examples on
# Debian 12, from Debian's own packages. Idempotent: safe to run again.
set -euo pipefail

packages=(
  build-essential cmake ninja-build pkg-config git
  libeigen3-dev libopenblas-openmp-dev
  libboost-context-dev  # emu/: the emulated CUDA device runs each CUDA thread as a fiber
  libhdf5-dev hdf5-tools
  libfmt-dev nlohmann-json3-dev libcli11-dev
  libssl-dev  # htrun's node agents: HMAC-SHA256 on their frames
  openmpi-bin libopenmpi-dev
  slurm-wlm munge libpmix-dev  # tests/resilience/slurm_local.sh; libpmix.so for srun --mpi=pmix
  openssh-server iproute2 procps util-linux  # tests/cluster: hosts as namespaces, each with its sshd
  libgtest-dev libgmock-dev libbenchmark-dev
  python3 python3-torch python3-h5py python3-numpy
  fortunes
  libicu-dev  # the GPT-2 tokenizer's Unicode letter and number classes (src/data/bpe_tokenizer.cc)
  libsentencepiece-dev sentencepiece  # SentencePiece models; spm_train/spm_encode for tests/data
  chromium  # tests/report/ht_report_chromium.sh: ht-report's page in headless Chromium
)

# Node.js runs the reference GPT-2 encoder (npm gpt-3-encoder, scripts/setup_npm.sh).
command -v node >/dev/null && command -v npm >/dev/null || packages+=(nodejs npm)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "setup: all ${#packages[@]} packages already installed"
else
  echo "setup: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  SUDO=""
  [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

# npm packages the reference tests compare with, pinned (scripts/setup_npm.sh).
"$(dirname "$0")/setup_npm.sh"
