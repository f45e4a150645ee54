#!/usr/bin/env bash
# The accelerator check: run it in the repository root as soon as a GPU or TPU is lent.
#
#   tools/device_check.sh                  install for the accelerator found, then on it: the device's
#                                          facts, the engine's parity tests, a random-weight Llama of a
#                                          real shape (1B; SHAPES="1b 8b" for both) built on the device,
#                                          served: its /health, one answer, start to ready and a bench
#                                          beside the rooflines (docs/BENCHMARKS.md beside it)
#   tools/device_check.sh --wheels DIR     the same, installing offline from wheels in DIR (a lent
#                                          machine reaches no index: docs/deploy.md says how to fill DIR)
#   tools/device_check.sh --dry-run        every step on the CPU, each made cheap (the tests collected, not
#                                          run; a tiny checkpoint; the bench planned, not run); `make test`
#                                          runs this, so the script cannot rot between the sessions that
#                                          have an accelerator
#
# Nothing it needs is large: the checkpoints are built on the device with a tokenizer made in code
# (tools/random_checkpoint.py), so a lent machine that takes 64 MiB a call gets the project and the
# wheels its image lacks, not a model. A Python whose jax already has the accelerator's plugin (an
# image's, e.g. 0.11) keeps it: the project goes on top without its dependencies.
# Everything it prints goes to $OUT/device_check.log too (OUT defaults to .cache/device_check), the
# bench's page to $OUT/BENCHMARKS.md. Sized for ten minutes on one H200.
set -euo pipefail
cd "$(dirname "$0")/.."

dry=0
wheels=""
while [[ $# -gt 0 ]]; do
    case "$1" in
        --dry-run) dry=1 ;;
        --wheels) wheels="$2"; shift ;;
        *) echo "usage: tools/device_check.sh [--dry-run] [--wheels DIR]" >&2; exit 2 ;;
    esac
    shift
done
out="${OUT:-.cache/device_check}"
mkdir -p "$out"
exec > >(tee "$out/device_check.log") 2>&1
step() { echo; echo "== $*"; }

step "1. the accelerator"
if [[ $dry == 1 ]]; then
    platform=cpu extra=""
elif command -v nvidia-smi >/dev/null && nvidia-smi -L >/dev/null 2>&1; then
    nvidia-smi -L
    cuda_major=$(nvidia-smi | sed -n 's/.*CUDA Version: \([0-9]*\).*/\1/p' | head -1)
    platform=cuda extra="cuda$([[ "${cuda_major:-12}" -ge 13 ]] && echo 13 || echo 12)"
elif compgen -G "/dev/accel*" >/dev/null || [[ -n "${TPU_ACCELERATOR_TYPE:-}" ]]; then
    platform=tpu extra="tpu"
else
    echo "no accelerator found (no working nvidia-smi, no /dev/accel*)" >&2
    exit 2
fi
echo "platform: $platform${extra:+ (extra: $extra)}"

step "2. the environment"
if [[ $dry == 1 ]]; then
    python="${PYTHON:-.venv/bin/python}"  # make setup's environment, as in CI
    echo "dry run: using $python; would install: pip install -e '.[dev,${extra:-cuda12}]'"
else
    base="${PYTHON:-python3}"
    venv=.venv-device
    # A machine whose Python already holds an accelerator's jaxlib (an image's) keeps it: the
    # project goes on top without its dependencies, the missing ones from the index or the wheels.
    if "$base" -c "import jax, sys; sys.exit(jax.default_backend() == 'cpu')" 2>/dev/null; then
        "$base" -m venv --system-site-packages "$venv"
        install=("$venv/bin/pip" install -q --no-deps)
    else
        "$base" -m venv "$venv"
        install=("$venv/bin/pip" install -q)
    fi
    [[ -n "$wheels" ]] && install+=(--no-index --find-links "$wheels")
    if [[ "${install[*]}" == *--no-deps* ]]; then
        "${install[@]}" -e . ${wheels:+"$wheels"/*.whl}
    else
        "${install[@]}" -e ".[dev,$extra]"
    fi
    python="$venv/bin/python"
fi
export JAX_PLATFORMS="$platform"
"$python" -c "import jax, jaxlib; print('jax', jax.__version__, 'jaxlib', jaxlib.__version__)"

step "3. the device"
"$python" - <<'EOF'
import jax

for device in jax.local_devices():
    stats = device.memory_stats() or {}
    free = stats.get("bytes_limit", 0) - stats.get("bytes_in_use", 0)
    print(f"{device.platform} {device.device_kind} #{device.id}: {free / 2**30:.1f} GiB free of {stats.get('bytes_limit', 0) / 2**30:.1f}")
print("default backend:", jax.default_backend())
EOF

step "4. the engine's parity tests on $platform"
parity=(
    tests/engine/test_family_parity.py
    tests/engine/test_gguf_smollm2_parity.py
    tests/engine/test_reproducible.py
    tests/engine/test_paged_attention.py
    tests/engine/test_kv_dtype.py
)
if [[ $dry == 1 ]]; then
    "$python" -m pytest -q --collect-only "${parity[@]}" | tail -1
else
    "$python" -m pytest -q -p no:cacheprovider "${parity[@]}" || echo "parity tests FAILED (above)"
fi

step "5. a random-weight Llama of a real shape, served: /health, one answer, the bench"
cp docs/BENCHMARKS.md "$out/BENCHMARKS.md"
shapes=(${SHAPES:-1b})
[[ $dry == 1 ]] && shapes=(tiny)
for shape in "${shapes[@]}"; do
    model="$out/random-$shape"
    "$python" tools/random_checkpoint.py "$model" --shape "$shape"
    if [[ $dry == 1 ]]; then
        "$(dirname "$python")/pooled" serve --help >/dev/null && echo "dry run: pooled serve parses"
        "$python" tools/device_bench.py --model "$model" --write "$out/BENCHMARKS.md" --plan
        continue
    fi
    started=$("$python" -c "import time; print(time.time())")
    "$(dirname "$python")/pooled" serve --model "$model" --port 18080 --ctx 8192 --decode-lanes 64 --max-queue 64 \
        >"$out/serve-$shape.log" 2>&1 &
    server=$!
    trap 'kill $server 2>/dev/null || true' EXIT
    for _ in $(seq 600); do
        if curl -sf http://127.0.0.1:18080/health | grep -q '"ready":true'; then break; fi
        sleep 0.5
    done
    ready=$("$python" -c "import time; print(round(time.time() - $started, 1))")
    curl -s http://127.0.0.1:18080/health | "$python" -c "import json, sys; h = json.load(sys.stdin); print({k: h.get(k) for k in ('state', 'model', 'ctx', 'weights')}, 'engine:', h.get('engine'))"
    curl -s http://127.0.0.1:18080/v1/completions -H 'content-type: application/json' \
        -d '{"prompt": "The capital of France is", "max_tokens": 12, "temperature": 0}'
    echo
    device=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1 || echo "$platform")
    "$python" tools/device_bench.py --model "$model" --ready-s "$ready" --device "${device:-$platform}" \
        --write "$out/BENCHMARKS.md" || echo "bench FAILED (above)"
    kill -TERM $server
    wait $server || true
    trap - EXIT
done

step "done"
