#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The Python module on a CUDA GPU (issue 30): builds it with MXKIT_GPU=CUDA for sm_90 (the sm90
# GEMM path needs sm_90a device code; the module target asks for it) with the python3 on PATH
# (torch, Triton, NumPy, pytest and pybind11 installed; no network needed), then runs every
# Python test: tests/python/test_host.py (host oracle, bindings vs C++, torch cast agreement) and
# tests/python/test_device.py (device quantize vs host byte for byte, torch-cast and Triton
# copies, streams, device GEMM).
#   bash scripts/gpu_python_check.sh [extra pytest arguments]
# Environment: MXKIT_BUILD_ROOT (default build/), CMAKE_CUDA_ARCHITECTURES (default 90),
# MXKIT_JOBS (default 8).
set -euo pipefail
cd "$(dirname "$0")/.."
root=${MXKIT_BUILD_ROOT:-build}
dir=$root/python-cuda
py=$(command -v python3)
nvcc=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
"$py" -c 'import torch, numpy, pytest, pybind11; print("torch", torch.__version__, "cuda", torch.cuda.is_available(), "numpy", numpy.__version__)'
cmake -S . -B "$dir" -DCMAKE_BUILD_TYPE=Release -DMXKIT_GPU=CUDA "-DCMAKE_CUDA_COMPILER=$nvcc" \
  "-DCMAKE_CUDA_ARCHITECTURES=${CMAKE_CUDA_ARCHITECTURES:-90}" -DMXKIT_BUILD_PYTHON=ON -DMXKIT_BUILD_TESTS=OFF \
  -DMXKIT_INSTALL=OFF "-DPython3_EXECUTABLE=$py"
cmake --build "$dir" -j "${MXKIT_JOBS:-8}" --target _mxkit mxkit_python_cpp_reference
PYTHONPATH="$PWD/$dir/python" MXKIT_CPP_REFERENCE="$PWD/$dir/python/mxkit_python_cpp_reference" \
  "$py" -m pytest -p no:cacheprovider -v -rs tests/python "$@"
