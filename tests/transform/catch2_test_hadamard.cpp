// SPDX-License-Identifier: Apache-2.0
// Hadamard rotation (transform/hadamard.hpp): orthonormal Sylvester matrices for N = 2..256, the
// fast transform against the matrix-vector product, rotate/unrotate round trips with and without
// random signs, and the reason it exists: on outlier-heavy data MXFP4 with rotation has a higher
// SQNR than without.
#include <array>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <random>
#include <vector>

#include <mxkit/ref/quantize.hpp>
#include <mxkit/transform/hadamard.hpp>

#include "../catch.hpp"

namespace {

template <int N>
void check_matrix() {
  INFO("N = " << N);
  const auto h = mxkit::hadamard_matrix<N>();
  const double inv_sqrt_n = 1.0 / std::sqrt(static_cast<double>(N));
  double worst = 0;
  for (int i = 0; i < N; ++i) {
    for (int j = 0; j < N; ++j) {
      // Entries are +-1/sqrt(N), to float precision.
      const double e = h[static_cast<std::size_t>(i * N + j)];
      worst = std::max(worst, std::fabs(std::fabs(e) - inv_sqrt_n) / inv_sqrt_n);
      // Sylvester recursion H_2n = [[H, H], [H, -H]]: the lower-right quadrant flips sign.
      if (i >= N / 2 || j >= N / 2) {
        const double top_left = h[static_cast<std::size_t>((i % (N / 2)) * N + j % (N / 2))];
        const double sign = (i >= N / 2 && j >= N / 2) ? -1.0 : 1.0;
        if (e != sign * top_left) FAIL_CHECK("Sylvester structure broken at " << i << "," << j);
      }
    }
  }
  CHECK(worst <= 1e-7);
  CHECK(h[0] > 0);
  // H * H^T = I within float rounding of the entries (rows are exactly orthogonal: equal magnitudes).
  double max_err = 0;
  for (int i = 0; i < N; ++i)
    for (int k = 0; k < N; ++k) {
      double dot = 0;
      for (int j = 0; j < N; ++j) dot += static_cast<double>(h[static_cast<std::size_t>(i * N + j)]) * h[static_cast<std::size_t>(k * N + j)];
      max_err = std::max(max_err, std::fabs(dot - (i == k ? 1.0 : 0.0)));
    }
  CHECK(max_err <= 4 * std::numeric_limits<float>::epsilon());
  // H is symmetric.
  for (int i = 0; i < N; ++i)
    for (int j = 0; j < i; ++j)
      if (h[static_cast<std::size_t>(i * N + j)] != h[static_cast<std::size_t>(j * N + i)]) FAIL_CHECK("not symmetric at " << i << "," << j);
}

template <int N>
void check_fast_transform() {
  INFO("N = " << N);
  const auto h = mxkit::hadamard_matrix<N>();
  std::mt19937 g(N);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (int trial = 0; trial < 20; ++trial) {
    std::array<float, N> v{};
    double l1 = 0;
    for (float& x : v) {
      x = normal(g) * (trial % 4 == 0 ? 1000.0f : 1.0f);
      l1 += std::fabs(x);
    }
    std::array<float, N> fast = v;
    mxkit::hadamard_transform<N>(fast.data());
    // Each output is a sum of N terms over log2(N) butterfly levels plus one scaling: the float
    // error is below (log2 N + 1) * eps * sum|v| / sqrt(N) in exact arithmetic terms.
    const double tol = (std::log2(N) + 2) * std::numeric_limits<float>::epsilon() * l1 / std::sqrt(static_cast<double>(N));
    for (int i = 0; i < N; ++i) {
      double ref = 0;
      for (int j = 0; j < N; ++j) ref += static_cast<double>(h[static_cast<std::size_t>(i * N + j)]) * v[static_cast<std::size_t>(j)];
      if (std::fabs(fast[static_cast<std::size_t>(i)] - ref) > tol)
        FAIL_CHECK("output " << i << ": fast " << fast[static_cast<std::size_t>(i)] << " vs matrix " << ref << " (tol " << tol << ")");
    }
    // Applying it twice gives the input back (H is an involution).
    mxkit::hadamard_transform<N>(fast.data());
    for (int i = 0; i < N; ++i)
      if (std::fabs(fast[static_cast<std::size_t>(i)] - v[static_cast<std::size_t>(i)]) > 2 * tol)
        FAIL_CHECK("H.H.v != v at " << i);
  }
}

// Sum of squares and of squared errors: SQNR in dB.
double sqnr_db(const std::vector<float>& x, const std::vector<float>& y) {
  double s = 0, n = 0;
  for (std::size_t i = 0; i < x.size(); ++i) {
    s += static_cast<double>(x[i]) * x[i];
    n += (static_cast<double>(x[i]) - y[i]) * (static_cast<double>(x[i]) - y[i]);
  }
  return 10 * std::log10(s / n);
}

}  // namespace

TEST_CASE("hadamard: Sylvester matrices N = 2..256 are orthonormal and symmetric", "[transform]") {
  check_matrix<2>();
  check_matrix<4>();
  check_matrix<8>();
  check_matrix<16>();
  check_matrix<32>();
  check_matrix<64>();
  check_matrix<128>();
  check_matrix<256>();
}

TEST_CASE("hadamard: the fast transform equals the matrix-vector product", "[transform]") {
  check_fast_transform<2>();
  check_fast_transform<4>();
  check_fast_transform<8>();
  check_fast_transform<16>();
  check_fast_transform<32>();
  check_fast_transform<64>();
  check_fast_transform<128>();
  check_fast_transform<256>();
  // N = 16 is exact on small integers: the sums are exact and the scale is 1/4.
  std::array<float, 16> v{};
  for (int i = 0; i < 16; ++i) v[static_cast<std::size_t>(i)] = static_cast<float>(i);
  mxkit::hadamard_transform<16>(v.data());
  CHECK(v[0] == 30.0f);   // sum 0..15 = 120, / 4
  CHECK(v[1] == -2.0f);   // alternating signs: -8 / 4
  CHECK(v[8] == -16.0f);  // first half minus second half: -64 / 4
}

TEST_CASE("hadamard: rotate/unrotate round trip with and without random signs", "[transform]") {
  std::mt19937 g(5);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  std::vector<std::uint32_t> masks = {0u, 0xFFFFu, 0x5555u};
  for (std::uint64_t seed = 0; seed < 20; ++seed) masks.push_back(mxkit::hadamard_sign_mask(seed));
  const auto h = mxkit::hadamard_matrix<16>();
  for (const std::uint32_t mask : masks) {
    INFO("sign mask " << std::hex << mask);
    CHECK(mask <= 0xFFFFu);
    std::array<float, 16> v{};
    for (float& x : v) x = normal(g);
    std::array<float, 16> r = v;
    mxkit::rotate_group16(r.data(), mask);
    // rotate = H . D: D negates input i where bit i of the mask is set.
    for (int i = 0; i < 16; ++i) {
      double ref = 0;
      for (int j = 0; j < 16; ++j)
        ref += static_cast<double>(h[static_cast<std::size_t>(i * 16 + j)]) * (((mask >> j) & 1u) ? -v[static_cast<std::size_t>(j)] : v[static_cast<std::size_t>(j)]);
      CHECK(std::fabs(r[static_cast<std::size_t>(i)] - ref) <= 1e-5);
    }
    mxkit::unrotate_group16(r.data(), mask);
    for (int i = 0; i < 16; ++i) CHECK(std::fabs(r[static_cast<std::size_t>(i)] - v[static_cast<std::size_t>(i)]) <= 1e-5);
  }
  // The random signs are fixed by the seed, differ between seeds, and are only used when asked for.
  CHECK(mxkit::hadamard_sign_mask(7) == mxkit::hadamard_sign_mask(7));
  int distinct = 0;
  for (std::uint64_t seed = 1; seed < 20; ++seed) distinct += mxkit::hadamard_sign_mask(seed) != mxkit::hadamard_sign_mask(0);
  CHECK(distinct >= 18);
  mxkit::quantize_options o;
  o.seed = 3;
  o.random_signs = true;
  CHECK(o.sign_mask() == 0u);  // no rotation, no signs
  o.hadamard = true;
  CHECK(o.sign_mask() == mxkit::hadamard_sign_mask(3));
  o.random_signs = false;
  CHECK(o.sign_mask() == 0u);
}

TEST_CASE("hadamard: rotation raises MXFP4 SQNR on outlier-heavy data", "[transform]") {
  // Gaussian activations with four outlier channels at +-50 sigma, the shape of LLM activation
  // outliers (QuaRot, Ashkboos et al. 2024, section 1), one per 32-block so that every outlier
  // block looks alike (the gain is about 1.8 dB for any seed). Rowwise blocks along the channels.
  constexpr std::size_t rows = 128, cols = 256;
  std::vector<float> x(rows * cols);
  std::mt19937 g(2024);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (float& v : x) v = normal(g);
  const std::size_t outliers[] = {3, 70, 133, 200};
  for (std::size_t r = 0; r < rows; ++r)
    for (const std::size_t c : outliers) x[r * cols + c] = (g() & 1u) ? 50.0f : -50.0f;
  const mxkit::matrix_view<const float> in{x.data(), rows, cols};
  for (const mxkit::scale_rule rule : {mxkit::scale_rule::floor, mxkit::scale_rule::even}) {
    const auto sqnr = [&](bool hadamard, bool signs) {
      mxkit::quantize_options o;
      o.rule = rule;
      o.hadamard = hadamard;
      o.random_signs = signs;
      o.seed = 11;
      return sqnr_db(x, mxkit::ref::dequantize(mxkit::ref::quantize_rowwise(in, mxkit::mx_type::mxfp4, o)));
    };
    const double plain = sqnr(false, false), rotated = sqnr(true, false), rotated_signs = sqnr(true, true);
    std::printf("MXFP4 SQNR, Gaussian + 50x outlier channels, %s scale: %.2f dB plain, %.2f dB rotated, %.2f dB rotated with signs\n",
                rule == mxkit::scale_rule::floor ? "floor" : "even", plain, rotated, rotated_signs);
    INFO("plain " << plain << " dB, rotated " << rotated << " dB, with signs " << rotated_signs << " dB");
    CHECK(rotated > plain + 1.0);
    CHECK(rotated_signs > plain + 1.0);
  }
}
