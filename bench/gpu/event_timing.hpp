// SPDX-License-Identifier: Apache-2.0
#pragma once
// Median time of a device operation over single calls bracketed by events on one stream (after
// three warm-up calls): the GPU benchmarks' one timing loop.
#include <algorithm>
#include <vector>

#include <mxkit/gpu/runtime.hpp>

namespace mxkit_bench {

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
