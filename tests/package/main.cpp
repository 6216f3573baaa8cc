// README "Usage", verbatim: quantize an (8, 64) matrix to MXFP4 and back. Exits 1 if the result
// is off (ctest package.*).
#include <mxkit/mxkit.hpp>

#include <cmath>
#include <cstdio>
#include <vector>

int main() {
  std::vector<float> x(8 * 64);  // (8, 64) row-major
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = std::sin(0.37f * static_cast<float>(i));
  const mxkit::matrix_view<const float> in{x.data(), 8, 64};
  const mxkit::mx_tensor q = mxkit::quantize_rowwise(in, mxkit::mx_type::mxfp4);  // 32-blocks along rows
  const std::vector<float> y = mxkit::dequantize(q);                                 // (8, 64) floats
  const mxkit::e2m1 e = mxkit::e2m1::from_float(5.0f);  // tie between 4 and 6: nearest-even gives 4
  float err = 0;
  for (std::size_t i = 0; i < x.size(); ++i) err = std::fmax(err, std::fabs(x[i] - y[i]));
  std::printf("%zu bytes, max error %g, e2m1(5) = %g\n", q.bytes(), err, e.to_float());
  return e.to_float() == 4.0f && err < 0.25f ? 0 : 1;  // |x| < 1: FP4 clips by at most 1/4 under floor
}
