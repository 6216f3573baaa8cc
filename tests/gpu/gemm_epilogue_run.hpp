// SPDX-License-Identifier: Apache-2.0
#pragma once
// The output side of one device GEMM test call, shared by the MX and NVFP4 GEMM tests: D on the
// device (poisoned, or holding C when beta != 0: random values, seeded), the reference's starting
// D (C's logical part), and the magnitude the error bound takes, |alpha| S + |beta C|.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <type_traits>
#include <vector>

#include <mxkit/format/float16.hpp>
#include <mxkit/gemm/product.hpp>

#include "../ref/gemm_test_util.hpp"
#include "gpu_test_util.hpp"

namespace gpu_test {

template <class Out>
struct epilogue_run {
  std::size_t p, q, ld;
  mxkit::gemm_epilogue e;
  device_out<Out> d;
  std::vector<Out> c;  // [p, ld], zeros unless beta != 0

  epilogue_run(std::size_t p_, std::size_t q_, std::size_t ld_pad, mxkit::gemm_epilogue e_, std::uint64_t seed)
      : p(p_), q(q_), ld(q_ + ld_pad), e(e_), d(p_, q_, q_ + ld_pad), c(p_ * (q_ + ld_pad)) {
    if (e.beta == 0.0f) return;
    const std::vector<float> cf = gemm_test::random_matrix(p, ld, seed ^ 0xC, 1);
    for (std::size_t i = 0; i < c.size(); ++i) {
      if constexpr (std::is_same_v<Out, float>) c[i] = cf[i];
      else c[i] = mxkit::bfloat16::from_float(cf[i]);
    }
    d.set_all(c);
  }
  // The [p, q] D the reference starts from (C's logical part).
  std::vector<Out> reference_start() const {
    std::vector<Out> want(p * q);
    for (std::size_t i = 0; i < p; ++i)
      for (std::size_t j = 0; j < q; ++j) want[i * q + j] = c[i * ld + j];
    return want;
  }
  // |alpha| S + |beta C| element by element, from S = sum |a b| of the product.
  std::vector<double> magnitude(std::vector<double> s) const {
    for (std::size_t i = 0; i < s.size(); ++i) {
      s[i] *= std::fabs(e.alpha);
      if (e.beta != 0.0f) s[i] += std::fabs(e.beta * static_cast<double>(mxkit::load_float(c[(i / q) * ld + i % q])));
    }
    return s;
  }
};

}  // namespace gpu_test
