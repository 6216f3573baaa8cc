#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The Python module on a CUDA GPU (issue 30): builds it with MXKIT_GPU=CUDA for sm_90 (the sm90
# GEMM path needs sm_90a device code; the module target asks for it) with the python3 on PATH
# (torch, Triton, NumPy, pytest and pybind11 installed; no network needed), then runs every
# Python test: tests/python/test_device.py (device quantize vs host byte for byte, torch-cast and
# Triton copies, streams, result lifetimes, device GEMM), tests/python/test_dlpack.py (capsule
# protocol edges, with this machine's NumPy and torch) and tests/python/test_host.py.
#   bash scripts/gpu_python_check.sh [extra pytest arguments]
# Diagnosable crashes: the module is built with -g (RelWithDebInfo: -O2 -g), pytest runs under
# -X faulthandler (a fatal signal prints every thread's Python stack), and when pytest dies of a
# signal the same run is repeated under gdb with MXKIT_PYTHON_TRACE=1 and -s, which prints the
# module's DLPack import / export / deleter calls up to the crash and then the C++ backtrace of
# every thread. MXKIT_PYTHON_GDB=0 skips that repeat.
# Environment: MXKIT_BUILD_ROOT (default build/), CMAKE_CUDA_ARCHITECTURES (default 90),
# MXKIT_JOBS (default 8), MXKIT_PYTHON_BUILD_TYPE (default RelWithDebInfo).
set -euo pipefail
cd "$(dirname "$0")/.."
root=${MXKIT_BUILD_ROOT:-build}
dir=$root/python-cuda
py=$(command -v python3)
nvcc=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
"$py" -c 'import sys, torch, numpy, pytest, pybind11; print("python", sys.version.split()[0], "torch", torch.__version__, "cuda", torch.version.cuda, torch.cuda.is_available(), "numpy", numpy.__version__, "pybind11", pybind11.__version__)'
"$nvcc" --version | tail -1
cmake -S . -B "$dir" "-DCMAKE_BUILD_TYPE=${MXKIT_PYTHON_BUILD_TYPE:-RelWithDebInfo}" -DMXKIT_GPU=CUDA "-DCMAKE_CUDA_COMPILER=$nvcc" \
  "-DCMAKE_CUDA_ARCHITECTURES=${CMAKE_CUDA_ARCHITECTURES:-90}" -DMXKIT_BUILD_PYTHON=ON -DMXKIT_BUILD_TESTS=OFF \
  -DMXKIT_INSTALL=OFF "-DPython3_EXECUTABLE=$py"
cmake --build "$dir" -j "${MXKIT_JOBS:-8}" --target _mxkit mxkit_python_cpp_reference
# Which C++ runtime the module uses: it must name libstdc++.so.6 and define none of its code.
so=$(ls "$dir"/python/mxkit/_mxkit*.so)
echo "module C++ runtime: $(readelf -d "$so" | grep -o 'libstdc++[^]]*' | tr '\n' ' ')(needed); $(nm -C --defined-only "$so" | grep -c 'std::ostream::_M_insert') libstdc++ stream functions defined inside; compiler $("${CXX:-$(command -v g++)}" -print-file-name=libstdc++.so)"
export PYTHONPATH="$PWD/$dir/python" MXKIT_CPP_REFERENCE="$PWD/$dir/python/mxkit_python_cpp_reference" PYTHONFAULTHANDLER=1
rc=0
"$py" -X faulthandler -m pytest -p no:cacheprovider -v -rs tests/python "$@" || rc=$?
if [ "$rc" -gt 128 ] && [ "${MXKIT_PYTHON_GDB:-1}" != 0 ]; then
  echo "== pytest died of signal $((rc - 128)); the same run under gdb, with the module's DLPack trace =="
  gdb=$(command -v gdb || command -v cuda-gdb || true)  # the device image has cuda-gdb only
  if [ -n "$gdb" ]; then
    MXKIT_PYTHON_TRACE=1 "$gdb" -q -batch -ex "set confirm off" -ex "set pagination off" -ex "handle SIGPIPE nostop" \
      -ex run -ex "info sharedlibrary mxkit" -ex bt -ex "thread apply all bt 40" \
      --args "$py" -X faulthandler -m pytest -p no:cacheprovider -v -s -x tests/python "$@" || true
  else
    echo "(gdb is not installed: apt-get install gdb for the C++ backtrace; the trace alone follows)"
    MXKIT_PYTHON_TRACE=1 "$py" -X faulthandler -m pytest -p no:cacheprovider -v -s -x tests/python "$@" || true
  fi
fi
exit "$rc"
