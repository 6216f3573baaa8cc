// SPDX-License-Identifier: Apache-2.0
#pragma once
// What every GPU benchmark does the same way: find the GPU (or report itself skipped) and time
// a device operation.
#include <algorithm>
#include <cstdio>
#include <vector>

#include <mxkit/gpu/runtime.hpp>

namespace mxkit_bench {

// Device 0's properties; false, after printing "no GPU: skipped", when there is no GPU (the
// benchmark then exits 77, the skip code).
inline bool first_gpu(mxkit::gpu::device_properties& props) {
  int devices = 0;
  if (mxkit::gpu::get_device_count(&devices) != mxkit::gpu::success || devices == 0) {
    std::printf("no GPU: skipped\n");
    return false;
  }
  MXKIT_GPU_CHECK(mxkit::gpu::get_device_properties(&props, 0));
  return true;
}

// Median time of a device operation over single calls bracketed by events on one stream (after
// three warm-up calls): the GPU benchmarks' one timing loop.
template <class F>
double median_ms(F&& f, int repeats, mxkit::gpu::stream_t s) {
  for (int i = 0; i < 3; ++i) f();
  std::vector<double> t;
  mxkit::gpu::event start, stop;
  for (int i = 0; i < repeats; ++i) {
    start.record(s);
    f();
    stop.record(s);
    t.push_back(stop.elapsed_ms_since(start));
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

}  // namespace mxkit_bench
