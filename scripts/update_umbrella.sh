#!/usr/bin/env bash
# Rewrites include/mxkit/mxkit.hpp to include every host header (all of include/mxkit but gpu/).
# ctest static.headers fails when the umbrella misses one.
set -euo pipefail
cd "$(dirname "$0")/.."
{
  echo '#pragma once'
  echo '// Umbrella header: every host-safe mxkit header (everything under include/mxkit except gpu/).'
  echo '// Kept complete by scripts/update_umbrella.sh and checked by ctest static.headers.'
  find include/mxkit -name '*.hpp' ! -path 'include/mxkit/gpu/*' ! -name mxkit.hpp | sed 's|^include/||' |
    LC_ALL=C sort | sed 's|.*|#include <&>|'
} > include/mxkit/mxkit.hpp
echo "include/mxkit/mxkit.hpp: $(grep -c '^#include' include/mxkit/mxkit.hpp) headers"
