#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Rewrites the two umbrella headers from the tree (ctest static.headers fails when one is stale):
#   include/mxkit/mxkit.hpp  the numerics: every host header but the training stack
#   include/mxkit/training_stack.hpp  the training stack: nn/, train/, parallel/, io/, host/ and the
#                                     host layer kernels ref/nn/ (not the training program, train_program/,
#                                     which is the compiled library mxkit::train_program)
# gpu/ is in neither: it needs a GPU compiler.
set -euo pipefail
cd "$(dirname "$0")/.."
training='^mxkit/(nn/|train/|parallel/|io/|host/|ref/nn/|file_io\.hpp)'
headers=$(find include/mxkit -name '*.hpp' ! -path 'include/mxkit/gpu/*' ! -name mxkit.hpp ! -path include/mxkit/training_stack.hpp ! -path 'include/mxkit/train_program/*' |
          sed 's|^include/||' | LC_ALL=C sort)
{
  echo '// SPDX-License-Identifier: Apache-2.0'
  echo '#pragma once'
  echo '// Umbrella header of the numerics: formats, blocks, transforms, tensors, GEMM descriptors and the'
  echo '// host reference (quantizer, validate, GEMMs). The training stack is <mxkit/training_stack.hpp>; GPU code is'
  echo '// under <mxkit/gpu/...>. Written by scripts/update_umbrella.sh, checked by ctest static.headers.'
  grep -v -E "$training" <<<"$headers" | sed 's|.*|#include <&>|'
} > include/mxkit/mxkit.hpp
{
  echo '// SPDX-License-Identifier: Apache-2.0'
  echo '#pragma once'
  echo '// Umbrella header of the training stack: recipes, layers, model (nn/), the training loop, data and'
  echo '// optimizer (train/), several ranks (parallel/), files (io/), and the host backend (host/) with its'
  echo '// layer kernels (ref/nn/). Includes <mxkit/mxkit.hpp>.'
  echo '// Written by scripts/update_umbrella.sh, checked by ctest static.headers.'
  echo '#include <mxkit/mxkit.hpp>'
  grep -E "$training" <<<"$headers" | sed 's|.*|#include <&>|'
} > include/mxkit/training_stack.hpp
echo "mxkit.hpp: $(grep -c '^#include' include/mxkit/mxkit.hpp) headers; training_stack.hpp: $(grep -c "^#include" include/mxkit/training_stack.hpp)"
