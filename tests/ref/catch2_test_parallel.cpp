// SPDX-License-Identifier: Apache-2.0
// ref/parallel.hpp: the reference paths that validation calls (quantize, the reference GEMMs,
// validate, validate_gemm) give the same bytes, bit for bit, on 1, 2, 3 and 8 threads; the chunk
// helper covers every item once and passes worker exceptions to the caller.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <stdexcept>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include <mxkit/ref/gemm.hpp>
#include <mxkit/ref/parallel.hpp>
#include <mxkit/validation/validate.hpp>
#include <mxkit/validation/validate_gemm.hpp>

#include "../catch.hpp"

namespace {
using mxkit::block_axis;
using mxkit::matrix_view;
using mxkit::mx_type;

std::vector<float> parallel_matrix(std::size_t rows, std::size_t cols, std::uint64_t seed) {
  std::mt19937_64 g(seed);
  std::normal_distribution<float> n(0.0f, 1.0f);
  std::uniform_int_distribution<int> e(-10, 10);
  std::vector<float> x(rows * cols);
  for (float& v : x) v = std::ldexp(n(g), e(g));
  return x;
}

template <class T>
bool same_bits(const std::vector<T>& a, const std::vector<T>& b) {
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0);
}

}  // namespace

TEST_CASE("parallel: chunks cover every item once, in order, and rethrow", "[parallel]") {
  for (const unsigned threads : {1u, 2u, 3u, 8u})
    for (const std::size_t items : {std::size_t{0}, std::size_t{1}, std::size_t{5}, std::size_t{100}}) {
      std::vector<std::atomic<int>> seen(items);
      std::vector<std::pair<std::size_t, std::size_t>> ranges(mxkit::detail::parallel_chunk_count(items, threads));
      mxkit::detail::parallel_chunks(items, threads, [&](std::size_t first, std::size_t last, std::size_t chunk) {
        ranges[chunk] = {first, last};
        for (std::size_t i = first; i < last; ++i) ++seen[i];
      });
      for (std::size_t i = 0; i < items; ++i) CHECK(seen[i] == 1);
      for (std::size_t c = 1; c < ranges.size(); ++c) CHECK(ranges[c].first == ranges[c - 1].second);  // chunks in item order
    }
  CHECK_THROWS_WITH(mxkit::detail::parallel_chunks(10, 4,
                                                   [](std::size_t first, std::size_t, std::size_t) {
                                                     if (first >= 5) throw std::runtime_error("worker failed");
                                                   }),
                    mxkit_test::contains("worker failed"));
  // 0: by the work (one thread for a small call); n: n threads, at most one per item.
  CHECK(mxkit::detail::host_thread_count(0, 1000, 1000.0) == 1);
  CHECK(mxkit::detail::host_thread_count(3, 1000, 1.0) == 3);
  CHECK(mxkit::detail::host_thread_count(8, 2, 1e12) == 2);
  CHECK(mxkit::detail::host_thread_count(0, 1u << 20, 1e12) >= 1);
  // Inside a worker, automatic counts are 1 (no threads within threads); explicit ones hold.
  std::vector<unsigned> nested(4);
  mxkit::detail::parallel_chunks(4, 2, [&](std::size_t first, std::size_t, std::size_t) {
    nested[first] = mxkit::detail::host_thread_count(0, 1u << 20, 1e12) * 10 + mxkit::detail::host_thread_count(3, 100, 1.0);
  });
  for (const unsigned v : nested) CHECK(v == 13);
  CHECK_FALSE(mxkit::detail::in_host_worker());
}

TEST_CASE("parallel: quantize is byte-identical on any thread count", "[parallel]") {
  constexpr std::size_t rows = 67, cols = 93;  // ragged: padding, partial last lines
  const std::vector<float> x = parallel_matrix(rows, cols, 1);
  const matrix_view<const float> in{x.data(), rows, cols};
  for (const mx_type type : mxkit::all_mx_types)
    for (const block_axis axis : {block_axis::rowwise, block_axis::columnwise})
      for (const bool exotic : {false, true}) {
        mxkit::quantize_options o;
        if (exotic) {  // every per-element input: rotation with signs, stochastic rounding (Philox)
          o.hadamard = o.random_signs = true;
          o.round = mxkit::rounding::stochastic;
          o.rule = mxkit::scale_rule::even;
          o.seed = 77;
        }
        const mxkit::mx_tensor one = mxkit::ref::quantize(in, type, axis, o, 1);
        for (const unsigned threads : {2u, 3u, 8u}) {
          const mxkit::mx_tensor many = mxkit::ref::quantize(in, type, axis, o, threads);
          CHECK(std::ranges::equal(many.data(), one.data()));
          CHECK(std::ranges::equal(many.scales(), one.scales()));
        }
      }
}

TEST_CASE("parallel: the reference GEMMs are bit-identical on any thread count", "[parallel]") {
  constexpr std::size_t p = 37, q = 29, r = 96;
  const std::vector<float> a = parallel_matrix(p, r, 2), b = parallel_matrix(q, r, 3), c = parallel_matrix(p, q, 4);
  const matrix_view<const float> av{a.data(), p, r}, bv{b.data(), q, r};
  const mxkit::mx_tensor qa = mxkit::ref::quantize_rowwise(av, mx_type::mxfp8_e4m3), qb = mxkit::ref::quantize_rowwise(bv, mx_type::mxfp4);
  const mxkit::fp8_tensor fa = mxkit::quantize_fp8(av, mxkit::fp8_type::e4m3, 64.0f), fb = mxkit::quantize_fp8(bv, mxkit::fp8_type::e5m2, 0.5f);
  std::vector<mxkit::bfloat16> ha(a.size());
  for (std::size_t i = 0; i < a.size(); ++i) ha[i] = mxkit::bfloat16::from_float(a[i]);
  const matrix_view<const mxkit::bfloat16> hav{ha.data(), p, r};
  const auto run = [&](unsigned threads) {
    std::vector<float> mx = c, fp8 = c, hp = c;
    std::vector<mxkit::bfloat16> mx16(p * q);
    mxkit::ref::gemm(qa.view(), qb.view(), matrix_view<float>{mx.data(), p, q}, 1.5f, 0.5f, threads);
    mxkit::ref::gemm(qa.view(), qb.view(), matrix_view<mxkit::bfloat16>{mx16.data(), p, q}, 1.0f, 0.0f, threads);
    mxkit::ref::gemm(fa, fb, matrix_view<float>{fp8.data(), p, q}, 1.0f, 0.25f, threads);
    mxkit::ref::gemm(hav, bv, matrix_view<float>{hp.data(), p, q}, 1.0f, 0.0f, threads);
    return std::make_tuple(mx, mx16, fp8, hp);
  };
  const auto one = run(1);
  for (const unsigned threads : {2u, 3u, 8u}) {
    const auto many = run(threads);
    CHECK(same_bits(std::get<0>(many), std::get<0>(one)));
    CHECK(same_bits(std::get<1>(many), std::get<1>(one)));
    CHECK(same_bits(std::get<2>(many), std::get<2>(one)));
    CHECK(same_bits(std::get<3>(many), std::get<3>(one)));
  }
}

TEST_CASE("parallel: validate and validate_gemm report the same on any thread count", "[parallel]") {
  constexpr std::size_t rows = 70, cols = 96;
  const std::vector<float> x = parallel_matrix(rows, cols, 5);
  const matrix_view<const float> in{x.data(), rows, cols};
  mxkit::mx_tensor t = mxkit::ref::quantize_columnwise(in, mx_type::mxfp4);
  for (std::size_t i = 0; i < t.data().size(); i += 37) t.data()[i] ^= 0x11;  // mismatches in many lines
  for (std::size_t i = 0; i < t.scales().size(); i += 11) t.scales()[i] ^= 0x01;
  const auto describe = [](const mxkit::ref::mx_validation_report& r) { return mxkit::ref::to_string(r); };
  mxkit::ref::validate_options o;
  o.max_reported = 40;
  o.threads = 1;
  const mxkit::ref::mx_validation_report one = mxkit::ref::validate(in, t, o);
  CHECK(one.mismatch_count() > 100);
  for (const unsigned threads : {2u, 3u, 8u}) {
    o.threads = threads;
    const mxkit::ref::mx_validation_report many = mxkit::ref::validate(in, t, o);
    CHECK(many.scale_mismatches == one.scale_mismatches);
    CHECK(many.element_mismatches == one.element_mismatches);
    CHECK(many.padding_mismatches == one.padding_mismatches);
    CHECK(describe(many) == describe(one));
  }

  // validate_gemm on a product with planted errors in several column chunks (chunks of 256 lines).
  constexpr std::size_t p = 20, q = 600, r = 64;
  const std::vector<float> a = parallel_matrix(p, r, 6), b = parallel_matrix(q, r, 7);
  const mxkit::mx_tensor qa = mxkit::ref::quantize_rowwise(matrix_view<const float>{a.data(), p, r}, mx_type::mxfp8_e5m2);
  const mxkit::mx_tensor qb = mxkit::ref::quantize_rowwise(matrix_view<const float>{b.data(), q, r}, mx_type::mxfp8_e5m2);
  std::vector<float> d(p * q);
  mxkit::ref::gemm(qa.view(), qb.view(), matrix_view<float>{d.data(), p, q});
  for (const std::size_t j : {3u, 300u, 599u}) d[7 * q + j] *= 1.5f;
  d[19 * q + 450] = NAN;
  mxkit::ref::gemm_validate_options g;
  g.threads = 1;
  g.max_reported = 10;
  const mxkit::ref::gemm_validation_report gone = mxkit::ref::validate_gemm(qa.view(), qb.view(), matrix_view<const float>{d.data(), p, q}, g);
  CHECK(gone.over_bound == 4);
  for (const unsigned threads : {2u, 3u, 8u}) {
    g.threads = threads;
    const mxkit::ref::gemm_validation_report many = mxkit::ref::validate_gemm(qa.view(), qb.view(), matrix_view<const float>{d.data(), p, q}, g);
    CHECK(mxkit::ref::to_string(many) == mxkit::ref::to_string(gone));
  }
}
