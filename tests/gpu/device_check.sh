#!/usr/bin/env bash
# The GPU checks, as one script for a lent GPU machine (bare, offline, its own python3 with CUDA PyTorch):
#   1. what the machine has (nvidia-smi, torch, CUDA, NCCL);
#   2. tests/gpu: a trial on one CUDA device, NCCL through stratus.launchers.torch_distributed, and the local stack
#      on the GPU (its agent's slots from the GPUs, a Determined trial and an NNI AdaptDL trial on CUDA);
#   3. optionally ($ADAPTDL_EXAMPLE, a folder holding AdaptDL's own examples/linear_regression/main.py):
#      that example, unchanged, as an NNI adl trial on the GPU through `det`.
# Our Python dependencies that the machine lacks travel as wheels in $WHEELS (tests/gpu/device_wheels.txt
# says which and how to download them); they are installed into $SITE, ahead of the machine's own packages.
set -u
export PYTHONUNBUFFERED=1
PY=${PY:-python3}
WHEELS=${WHEELS:-.whl}
SITE=${SITE:-/tmp/site}
OUT=${OUT:-$(mktemp -d)}
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT" || exit 2

if [ -d "$WHEELS" ]; then
  "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$SITE" "$WHEELS"/*.whl || exit 2
fi
# The checkout, as `make` installs it: contract, harness and launchers as the `stratus` namespace's packages
# (setup.py), det, chalicelib and infra at the top level (the repository root on PYTHONPATH).
mkdir -p "$SITE/stratus"
for name in contract harness launchers; do ln -sfn "$ROOT/$name" "$SITE/stratus/$name"; done
export PYTHONPATH="$SITE:$ROOT"
"$PY" -c "import stratus.harness.pytorch, stratus.launchers, det.deploy.background" || exit 2

echo "== machine"
nvidia-smi -L
"$PY" - <<'EOF'
import torch
print("torch", torch.__version__, "CUDA", torch.version.cuda, "devices", torch.cuda.device_count())
if torch.cuda.is_available():
    print(torch.cuda.get_device_name(), "NCCL", ".".join(map(str, torch.cuda.nccl.version())))
EOF

echo "== tests/gpu"
"$PY" -m pytest -p no:cacheprovider -q -rA -s tests/gpu 2>&1 | tee "$OUT/gpu-tests.log"
status=${PIPESTATUS[0]}

if [ -n "${ADAPTDL_EXAMPLE:-}" ]; then
  echo "== AdaptDL's own examples/linear_regression as an NNI adl trial on the GPU"
  export STRATUS_HOME=$(mktemp -d) DET_MASTER=http://127.0.0.1:18977
  "$PY" -m det deploy local up --port 18977 || exit 2
  work=$(mktemp -d)
  cp "$ADAPTDL_EXAMPLE"/main.py "$work"/
  echo '{"lr": {"_type": "choice", "_value": [0.05, 0.1]}}' >"$work"/search_space.json
  cat >"$work"/config_adl.yml <<'EOF'
experimentName: adaptdl-linear-regression
trialConcurrency: 1
maxTrialNum: 1
trainingServicePlatform: adl
searchSpacePath: search_space.json
tuner: {builtinTunerName: TPE, classArgs: {optimize_mode: minimize}}
trial: {command: python3 main.py --epochs 20 --autoscale-bsz, codeDir: ., gpuNum: 1, adaptive: true}
EOF
  "$PY" -m det experiment create "$work"/config_adl.yml "$work" -f >"$OUT/adaptdl-example.log" 2>&1
  adl=$?
  grep -v "'Loss'" "$OUT/adaptdl-example.log" | tail -25
  "$PY" -m det trial describe 1 | head -12
  "$PY" -m det deploy local down
  [ "$adl" = 0 ] || status=1
fi
exit "$status"
