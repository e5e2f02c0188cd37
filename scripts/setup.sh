#!/usr/bin/env bash
# Create .venv and install the course package with its vLLM backend. Idempotent: a stamp in the
# venv records what was installed, and a second run with the same inputs does nothing.
#
#   bash scripts/setup.sh            # what `make setup` runs
#   COURSE_SKIP_SETUP=1              # environment already provisioned (e.g. the H200 machine with
#                                    # no network): do nothing, use `python3` and PYTHONPATH as they are
#   COURSE_BACKEND=cpu|gpu           # override the detection below
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${VENV:-.venv}
PYTHON=${PYTHON:-python3}

if [ "${COURSE_SKIP_SETUP:-0}" = "1" ]; then
  echo "setup: COURSE_SKIP_SETUP=1, so nothing is installed; the provisioned environment is used as it is."
  exit 0
fi

t0=$(date +%s)
# shellcheck source=scripts/install-backend.sh
source scripts/install-backend.sh   # detect_backend, install_backend, remove_broken, course_pip
detect_backend || exit $?
backend=$BACKEND; why=$BACKEND_WHY

stamp="$backend $(cat pyproject.toml requirements/$backend.txt | sha256sum | cut -c1-16)"
register_kernel() {   # the chapters ask for this kernel by name; re-registering is harmless
  "$VENV/bin/python" -m ipykernel install --user --name vllm-course \
    --display-name "Python (vllm-course)" >/dev/null 2>&1 \
    && echo "setup: Jupyter kernel 'Python (vllm-course)' runs $VENV/bin/python" \
    || echo "setup: could not register the Jupyter kernel (the chapters still run with $VENV/bin/jupyter lab)"
}

if [ -f "$VENV/.course-setup" ] && [ "$(cat "$VENV/.course-setup")" = "$stamp" ]; then
  echo "setup: $VENV is up to date ($backend backend); nothing to do."
  register_kernel
  "$VENV/bin/vllm-course" doctor --short || true
  exit 0
fi

echo "setup: backend = $backend ($why)"
if [ ! -x "$VENV/bin/python" ]; then
  echo "setup: creating $VENV with $($PYTHON --version 2>&1)"
  "$PYTHON" -m venv "$VENV"
fi
course_pip "$VENV/bin/python" install -q --upgrade pip >/dev/null 2>&1 || true
install_backend "$VENV/bin/python" "$backend"

echo "setup: installing the course package (editable) with its test tools"
course_pip "$VENV/bin/python" install -q -e ".[dev]"
if [ "$backend" = cpu ]; then   # a dependency must not have brought them back
  remove_broken "$VENV/bin/python"
fi
echo "setup: building the offline model cards"
"$VENV/bin/vllm-course" cards build
register_kernel
echo "$stamp" > "$VENV/.course-setup"
echo "setup: done in $(( $(date +%s) - t0 )) s. Check the result with: $VENV/bin/vllm-course doctor"
"$VENV/bin/vllm-course" doctor --short || true   # summary: vLLM build and version, torch, Python
