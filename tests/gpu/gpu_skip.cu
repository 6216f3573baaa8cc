// SPDX-License-Identifier: Apache-2.0
// Linked into every GPU test executable: with no usable GPU the program prints why and exits
// with code 77 before Catch2 starts, and ctest (SKIP_RETURN_CODE 77) reports the test as
// skipped rather than passed.
#include <cstdio>
#include <cstdlib>

#include <mxkit/gpu/runtime.hpp>

namespace {
const bool gpu_present = [] {
  if (mxkit::gpu::device_count() > 0) return true;
  std::printf("SKIPPED: no GPU device (or no driver); GPU tests need one\n");
  std::fflush(stdout);
  std::exit(77);
}();
}  // namespace

// The object file (object library mxkit_gpu_skip, compiled once) is on each test executable's
// link line, so it is always linked; this keeps the compiler from discarding the unused flag's
// initializer.
bool mxkit_gpu_test_device_present() { return gpu_present; }
