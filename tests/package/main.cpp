// SPDX-License-Identifier: Apache-2.0
// README "Usage", verbatim: quantize an (8, 64) matrix to MXFP4, check another kernel's output
// against mxkit's reference with validate, and decode. Exits 1 if anything is off (ctest package.*).
#include <mxkit/mxkit.hpp>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <vector>

int main() {
  std::vector<float> x(8 * 64);  // (8, 64) row-major
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = std::sin(0.37f * static_cast<float>(i));
  const mxkit::matrix_view<const float> in{x.data(), 8, 64};
  const mxkit::mx_tensor q = mxkit::ref::quantize_rowwise(in, mxkit::mx_type::mxfp4);  // 32-blocks along rows
  const std::vector<float> y = mxkit::ref::dequantize(q);                                 // (8, 64) floats

  // Another kernel's output (here mxkit's own bytes with one bit flipped) checked against the
  // reference: the report names the row, column and block of every differing byte.
  std::vector<std::uint8_t> theirs(q.data().begin(), q.data().end());
  theirs[5] ^= 0x10;  // row 0, element 11 (FP4: element 2i in the low nibble, 2i + 1 in the high)
  const mxkit::mx_const_view foreign{q.layout(), q.options(), theirs.data(), q.scales().data()};
  const mxkit::ref::mx_validation_report good = mxkit::ref::validate(in, q.view()), bad = mxkit::ref::validate(in, foreign);
  std::printf("%s\n%s\n", good.summary().c_str(), bad.summary().c_str());

  const mxkit::e2m1 e = mxkit::e2m1::from_float(5.0f);  // tie between 4 and 6: nearest-even gives 4
  float err = 0;
  for (std::size_t i = 0; i < x.size(); ++i) err = std::fmax(err, std::fabs(x[i] - y[i]));
  std::printf("%zu bytes, max error %g, e2m1(5) = %g\n", q.bytes(), err, e.to_float());
  const bool found = !bad.ok() && bad.element_mismatches == 1 && bad.scale_mismatches == 0;
  return good.ok() && found && e.to_float() == 4.0f && err < 0.25f ? 0 : 1;  // |x| < 1: FP4 clips by at most 1/4
}
