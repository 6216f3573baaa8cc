#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Issue 31's comparison at its scale on one GPU: mxkit's GPU training program and the PyTorch twin
# (tools/twin/twin.py, --device cuda) from the same initial weights (twin.py init, mxkit's scheme)
# on the same batches (--dump-batches), bf16 and MXFP4 without rotation, per seed; then the
# agreement test of the gap (twin.py compare). Shape and run of the issue: 4 layers, d_model 384,
# 6 heads (6 KV), SwiGLU 1024, seq 256, batch 64, 1200 steps, lr 2e-3, warmup 100, f32
# activations, the Python standard library's .py files as the corpus.
#   tools/twin/issue31_gpu.sh TRAIN_GPU OUT_DIR
# Environment: SEEDS (default "0 1 2"), STEPS (1200), RECIPES ("bf16 mxfp4-no-hadamard"),
# PYTHON (python3 with torch and a GPU), CORPUS (default: built from /usr/lib/python3*),
# TWIN_ARGS (extra twin.py train flags, e.g. "--schedule warmup-times-cosine").
set -euo pipefail
prog=$1 out=$2
seeds=${SEEDS:-"0 1 2"} steps=${STEPS:-1200} recipes=${RECIPES:-"bf16 mxfp4-no-hadamard"} py=${PYTHON:-python3}
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$out"
corpus=${CORPUS:-$out/python_stdlib.txt}
if [[ ! -s $corpus ]]; then
  find /usr/lib/python3* -name '*.py' -not -path '*/site-packages/*' -not -path '*/dist-packages/*' | LC_ALL=C sort | xargs cat > "$corpus"
fi
echo "corpus: $corpus ($(stat -c %s "$corpus") bytes)"
shape=(--layers 4 --d-model 384 --heads 6 --kv-heads 6 --ffn 1024 --seq 256 --batch 64)
run=(--steps "$steps" --warmup 100 --lr 2e-3 --activations f32 --log-every 1 --eval-every 0 --data "$corpus")
for s in $seeds; do
  "$py" "$here/twin.py" init --out "$out/init$s.safetensors" --n-layers 4 --d-model 384 --n-heads 6 --n-kv-heads 6 --d-ff 1024 --seed "$s"
  for r in $recipes; do
    "$prog" "${shape[@]}" "${run[@]}" --seed "$s" --recipe "$r" --init-from "$out/init$s.safetensors" \
      --dump-batches "$out/batches$s.bin" --csv "$out/mxkit_${r}_$s.csv" > "$out/mxkit_${r}_$s.log"
    "$py" "$here/twin.py" train --device cuda --init-from "$out/init$s.safetensors" --batches "$out/batches$s.bin" --recipe "$r" \
      --lr 2e-3 --warmup 100 --seed "$s" ${TWIN_ARGS:-} --csv "$out/twin_${r}_$s.csv" --mxkit-csv "$out/mxkit_${r}_$s.csv" > "$out/twin_${r}_$s.log"
    tail -n 3 "$out/twin_${r}_$s.log"
  done
done
for r in $recipes; do
  [[ $r == bf16 ]] && continue
  echo "== $r: gap to bf16, last 50 steps"
  "$py" "$here/twin.py" compare --last 50 \
    --mxkit $(for s in $seeds; do echo "$out/mxkit_${r}_$s.csv"; done) --twin $(for s in $seeds; do echo "$out/twin_${r}_$s.csv"; done) \
    --baseline-mxkit $(for s in $seeds; do echo "$out/mxkit_bf16_$s.csv"; done) \
    --baseline-twin $(for s in $seeds; do echo "$out/twin_bf16_$s.csv"; done) || true
done
