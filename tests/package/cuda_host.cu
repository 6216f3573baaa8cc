// SPDX-License-Identifier: Apache-2.0
// Host code in a .cu file of a project that links mxkit::mxkit only (tests/package, CUDA
// consumer): nvcc must get C++20 from mxkit::mxkit alone, as the C++ compiler does (the format
// headers do not parse as C++17, nvcc's default). Runs anywhere: it uses no GPU.
#include <cstdio>

#include <mxkit/block/quantize_block.hpp>
#include <mxkit/format/e2m1.hpp>

int main() {
  float x[mxkit::mx_block_size];
  for (int i = 0; i < mxkit::mx_block_size; ++i) x[i] = 0.5f * static_cast<float>(i - 16);
  const mxkit::mx_block<mxkit::mx_format<mxkit::mx_type::mxfp4>> q = mxkit::quantize_block<mxkit::mx_format<mxkit::mx_type::mxfp4>>(x, mxkit::quantize_options{}, 0);
  const float five = mxkit::e2m1::from_float(5.0f).to_float();  // tie between 4 and 6: nearest-even gives 4
  std::printf("C++ %ld in a .cu file: e2m1(5) = %g, block scale 2^%d\n", static_cast<long>(__cplusplus), five,
              static_cast<int>(q.scale.bits()) - 127);
  return five == 4.0f && __cplusplus >= 202002L ? 0 : 1;
}
