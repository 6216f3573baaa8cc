// SPDX-License-Identifier: Apache-2.0
#pragma once
// Checks a GEMM output that another implementation produced (cuBLASLt, hipBLASLt, a Triton or
// CUTLASS kernel, mxkit's own device GEMM) against the host reference, element by element under
// the accumulation bound that ref/gemm.hpp derives:
//
//   D[P,Q] = alpha * A[P,R] . B[Q,R]^T, both operands stored with the reduction axis R contiguous
//   (the TN form every MX copy has; tensor/foreign_layout.hpp describes foreign storage), D fp32
//   or bf16 with any leading dimension.
//
//   mxkit::gemm_validate_options o;
//   o.sample_rows = 16;                                    // 16 rows of an 8192^3 product: seconds
//   mxkit::gemm_validation_report r = mxkit::validate_gemm(a, b, d, o);
//   if (!r.ok()) std::cerr << r;                           // summary and the worst elements
//
// Operands: two MX copies (any element types, any foreign layout, the same rotation), two
// per-tensor FP8 matrices (fp8_view), or two float/bf16/fp16 matrices. The reference values are
// ref::gemm's bits (the same per-element sums, ref/gemm.hpp); D must be within
//   |d - ref| <= relative * S + absolute,   S = |alpha| * sum_k |a_k b_k| (scales applied, in double)
// where the relative bound, unless gemm_validate_options::relative sets it, is (u = 2^-24):
//   MX x MX             (2 nb + 34) u, nb = R/32 blocks: ref/gemm.hpp's bound for a kernel that
//                       sums each block in fp32 in any order and then adds blocks;
//   FP8, high precision (2 R + 4) u: the reference and the kernel each sum R fp32 products in
//                       some order ((R + 1) u each), plus the descale and alpha roundings;
//   accumulation::tensor_core (the default) adds 2^-9: FP8 tensor cores align and add products
//                       with about 14 bits (DeepSeek-V3 report, section 3.3.2); mxkit's Hopper
//                       kernel is held to 2^-9 S per element by tests/gpu/catch2_test_gemm.cu;
//                       accumulation::fp32 leaves it out, for kernels that promise fp32 sums;
//   alpha != 1          adds u (one more rounding);
//   bf16 output         adds 2^-7: kernel and reference may round to neighbouring bf16 values,
//                       one bf16 ulp, at most 2^-7 of |d| <= S.
// A NaN in D must be a NaN in the reference and the other way round; equal infinities pass.
// Rows: all of them, `sample_rows` of them (the first, the last, the rest drawn with `seed`), or
// the listed `rows`; every column of a checked row is checked. The reference for those rows runs
// on host threads over chunks of B's lines (decoded 256 lines at a time, so memory stays small).
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <ostream>
#include <random>
#include <sstream>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include <mxkit/error.hpp>
#include <mxkit/gemm/product.hpp>
#include <mxkit/ref/gemm.hpp>
#include <mxkit/ref/names.hpp>
#include <mxkit/ref/parallel.hpp>
#include <mxkit/tensor/foreign_layout.hpp>

MXKIT_BEGIN_NAMESPACE
namespace ref {

enum class gemm_accumulation : std::uint8_t {
  fp32,         // the kernel sums in fp32 (any order): the fp32 bound only
  tensor_core,  // FP8/FP4 tensor-core sums with fewer bits than fp32: the fp32 bound plus 2^-9
};

struct gemm_validate_options {
  float alpha = 1.0f;               // D = alpha * A.B^T
  std::size_t sample_rows = 0;      // 0: every row of D; n: n rows (first, last, the rest drawn with seed)
  std::vector<std::size_t> rows{};  // rows of D to check; overrides sample_rows when not empty
  std::uint64_t seed = 0x5EEDu;
  gemm_accumulation accumulation = gemm_accumulation::tensor_core;
  double relative = 0;           // > 0: this relative bound instead of the derived one
  double absolute = 0;           // added to every element's bound
  std::size_t max_reported = 8;  // worst elements listed
  unsigned threads = 0;          // host threads (ref/parallel.hpp); 0: as the machine and the size allow
};

// One checked element of D.
struct gemm_element_check {
  std::size_t row = 0, col = 0;
  double got = 0, want = 0;
  double magnitude = 0;  // S: |alpha| sum_k |a_k b_k|
  double bound = 0;      // relative * S + absolute
  double ratio = 0;      // |got - want| / bound (0 when equal; infinite for a NaN or Inf mismatch)
};

struct gemm_validation_report {
  gemm_shape shape;
  std::string operands;  // e.g. "mxfp8_e4m3 x mxfp8_e4m3 -> bf16"
  double relative_bound = 0, absolute_bound = 0;
  std::size_t rows_checked = 0, elements_checked = 0;
  std::size_t over_bound = 0;      // elements with ratio > 1 (NaN mismatches included)
  std::size_t nan_mismatches = 0;  // NaN on one side only
  double max_ratio = 0;            // largest ratio
  double max_error_over_magnitude = 0;  // largest |got - want| / S over finite elements with S > 0
  std::vector<gemm_element_check> worst;  // largest ratio first (row, then column, on ties)

  bool ok() const noexcept { return over_bound == 0; }
  std::string summary() const;
};

inline std::ostream& operator<<(std::ostream& s, const gemm_element_check& e) {
  return s << "(row " << e.row << ", col " << e.col << "): got " << e.got << ", want " << e.want << ", |diff| "
           << std::fabs(e.got - e.want) << ", S " << e.magnitude << ", bound " << e.bound << " (" << e.ratio << " of it)";
}

// "PASS gemm 8192x8192x8192 mxfp8_e4m3 x mxfp8_e4m3 -> bf16: 16 rows, 131072 elements within 0.0078 S; worst 0.012 of the bound"
inline std::string gemm_validation_report::summary() const {
  std::ostringstream s;
  s << (ok() ? "PASS" : "FAIL") << " gemm " << shape.p << 'x' << shape.q << 'x' << shape.r << ' ' << operands << ": ";
  if (ok()) {
    s << rows_checked << " rows, " << elements_checked << " elements within " << relative_bound << " S";
    if (absolute_bound > 0) s << " + " << absolute_bound;
    s << "; worst " << max_ratio << " of the bound";
  } else {
    s << over_bound << " of " << elements_checked << " elements (" << rows_checked << " rows) over " << relative_bound << " S";
    if (absolute_bound > 0) s << " + " << absolute_bound;
    if (nan_mismatches > 0) s << " (" << nan_mismatches << " NaN mismatches)";
    if (!worst.empty()) s << "; worst " << worst.front();
  }
  return s.str();
}

inline std::ostream& operator<<(std::ostream& s, const gemm_validation_report& r) {
  s << r.summary();
  if (r.worst.empty() || r.worst.front().ratio == 0) return s;
  s << "\n  max |d - ref| / S " << r.max_error_over_magnitude << "; worst elements:";
  for (const gemm_element_check& e : r.worst) s << "\n  " << e;
  return s;
}

inline std::string to_string(const gemm_validation_report& r) {
  std::ostringstream s;
  s << r;
  return s.str();
}

}  // namespace ref
namespace detail {
template <class T>
double as_double(const T& x) noexcept {
  if constexpr (std::is_arithmetic_v<T>) return static_cast<double>(x);
  else return static_cast<double>(x.to_float());
}

// Running state of an element-wise check; merge() keeps the result independent of how the
// elements were split.
struct bound_check {
  gemm_validation_report r;
  std::size_t keep = 0;

  static bool worse(const gemm_element_check& a, const gemm_element_check& b) noexcept {
    if (a.ratio != b.ratio) return a.ratio > b.ratio;
    return a.row != b.row ? a.row < b.row : a.col < b.col;
  }
  void offer(const gemm_element_check& e) {
    if (keep == 0) return;
    if (r.worst.size() < keep) {
      r.worst.push_back(e);
      std::push_heap(r.worst.begin(), r.worst.end(), worse);  // heap top: the least bad kept
    } else if (worse(e, r.worst.front())) {
      std::pop_heap(r.worst.begin(), r.worst.end(), worse);
      r.worst.back() = e;
      std::push_heap(r.worst.begin(), r.worst.end(), worse);
    }
  }
  void check(std::size_t row, std::size_t col, double got, double want, double magnitude, double relative, double absolute) {
    gemm_element_check e{row, col, got, want, magnitude, relative * magnitude + absolute, 0};
    const bool got_nan = std::isnan(got), want_nan = std::isnan(want);
    if (got_nan || want_nan) {
      e.ratio = got_nan == want_nan ? 0.0 : INFINITY;
      if (got_nan != want_nan) ++r.nan_mismatches;
    } else if (got == want) {
      e.ratio = 0.0;
    } else {
      const double diff = std::fabs(got - want);
      e.ratio = e.bound > 0 ? diff / e.bound : INFINITY;  // Inf - finite, or opposite infinities: infinite
      if (magnitude > 0 && std::isfinite(diff)) r.max_error_over_magnitude = std::max(r.max_error_over_magnitude, diff / magnitude);
    }
    ++r.elements_checked;
    if (!(e.ratio <= 1.0)) ++r.over_bound;
    if (!(e.ratio <= r.max_ratio)) r.max_ratio = e.ratio;
    if (e.ratio > 0) offer(e);
  }
  void merge(const bound_check& o) {
    r.elements_checked += o.r.elements_checked;
    r.over_bound += o.r.over_bound;
    r.nan_mismatches += o.r.nan_mismatches;
    r.max_ratio = std::max(r.max_ratio, o.r.max_ratio);
    r.max_error_over_magnitude = std::max(r.max_error_over_magnitude, o.r.max_error_over_magnitude);
    for (const gemm_element_check& e : o.r.worst) offer(e);
  }
  gemm_validation_report finish() {
    std::sort(r.worst.begin(), r.worst.end(), worse);
    return r;
  }
};
}  // namespace detail
namespace ref {

// The element-wise check on its own: got[i] against want[i] with bound relative * magnitude[i]
// + absolute, for n values of a [n / cols, cols] row-major matrix (row and column of the worst
// elements come from i). The checks of validate_gemm; tests of other products use it directly.
template <class Got, class Want>
gemm_validation_report compare_within_bound(const Got* got, const Want* want, const double* magnitude, std::size_t n,
                                            std::size_t cols, double relative, double absolute = 0, std::size_t max_reported = 8) {
  detail::require(n == 0 || (got && want && magnitude), "compare_within_bound: null pointer for ", n, " values");
  detail::require(cols > 0 && n % cols == 0, "compare_within_bound: ", n, " values are not whole rows of ", cols, " columns");
  detail::bound_check c;
  c.keep = max_reported;
  c.r.shape = {n / cols, cols, 0};
  c.r.rows_checked = n / cols;
  c.r.relative_bound = relative;
  c.r.absolute_bound = absolute;
  for (std::size_t i = 0; i < n; ++i)
    c.check(i / cols, i % cols, detail::as_double(got[i]), detail::as_double(want[i]), magnitude[i], relative, absolute);
  return c.finish();
}

// The relative bound validate_gemm applies (file comment); `mx` says the operands are block-scaled
// copies with blocks of block_size elements (each block's dot product is exact, r / block_size
// of them are added).
inline double gemm_relative_bound(bool mx, std::size_t r, gemm_accumulation a, bool bf16_output, float alpha,
                                  std::size_t block_size = mx_block_size) noexcept {
  constexpr double u = 0x1p-24;
  double rel = mx ? (2.0 * static_cast<double>(r / block_size) + 34.0) * u : (2.0 * static_cast<double>(r) + 4.0) * u;
  if (a == gemm_accumulation::tensor_core) rel += 0x1p-9;
  if (alpha != 1.0f) rel += u;
  if (bf16_output) rel += 0x1p-7;
  return rel;
}

}  // namespace ref
namespace detail {
// The rows of D a validation checks (sorted, distinct).
inline std::vector<std::size_t> gemm_rows_to_check(std::size_t p, const gemm_validate_options& o) {
  std::vector<std::size_t> rows;
  if (!o.rows.empty()) {
    for (const std::size_t r : o.rows) require(r < p, "validate_gemm: row ", r, " is outside the ", p, " rows of D");
    rows = o.rows;
  } else if (o.sample_rows == 0 || o.sample_rows >= p) {
    rows.resize(p);
    for (std::size_t i = 0; i < p; ++i) rows[i] = i;
    return rows;
  } else {
    rows.push_back(0);
    if (o.sample_rows > 1) rows.push_back(p - 1);
    std::mt19937_64 rng(o.seed);  // the middle rows, drawn without replacement
    std::uniform_int_distribution<std::size_t> pick(1, p - 2);
    while (rows.size() < o.sample_rows) {
      const std::size_t r = pick(rng);
      if (std::find(rows.begin(), rows.end(), r) == rows.end()) rows.push_back(r);
    }
  }
  std::sort(rows.begin(), rows.end());
  rows.erase(std::unique(rows.begin(), rows.end()), rows.end());
  return rows;
}

template <class Out>
void check_gemm_output(const matrix_view<const Out>& d, const gemm_shape& s) {
  require(d.rows == s.p && d.cols == s.q, "validate_gemm: D is ", d.rows, "x", d.cols, ", expected ", s.p, "x", s.q);
  require(d.rows == 0 || d.cols == 0 || d.data != nullptr, "validate_gemm: D has null data");
  require(d.ld == 0 || d.ld >= d.cols, "validate_gemm: D's leading dimension ", d.ld, " is smaller than its ", d.cols, " columns");
  // rows x ld must fit, as for every matrix the quantizer reads: a wrapped row address reads row 0 again.
  check_matrix(d, "validate_gemm: D (", d.rows, "x", d.cols, ", leading dimension ", d.ld, ")");
}

// The shared driver: for chunks of D's columns (B's lines) [j0, j0 + n), fill(j0, n, want,
// magnitude) writes the reference ([rows.size(), n], Out) and S; the chunks run on threads.
template <class Out, class Fill>
gemm_validation_report check_gemm_rows(const matrix_view<const Out>& d, const gemm_shape& s, const std::vector<std::size_t>& rows,
                                       double relative, const gemm_validate_options& o, std::string operands, Fill&& fill) {
  constexpr std::size_t chunk_lines = 256;
  const std::size_t m = rows.size();
  const double work = 2.0 * static_cast<double>(m) * static_cast<double>(s.q) * static_cast<double>(std::max<std::size_t>(s.r, 1));
  const std::size_t chunks = (s.q + chunk_lines - 1) / chunk_lines;
  const unsigned threads = host_thread_count(o.threads, chunks, work);
  std::vector<bound_check> parts(parallel_chunk_count(chunks, threads));
  parallel_chunks(chunks, threads, [&](std::size_t first, std::size_t last, std::size_t part) {
    bound_check& c = parts[part];
    c.keep = o.max_reported;
    std::vector<Out> want;
    std::vector<double> magnitude;
    for (std::size_t chunk = first; chunk < last; ++chunk) {
      const std::size_t j0 = chunk * chunk_lines, n = std::min(chunk_lines, s.q - j0);
      want.assign(m * n, Out{});
      magnitude.assign(m * n, 0.0);
      fill(j0, n, want.data(), magnitude.data());
      for (std::size_t ii = 0; ii < m; ++ii)
        for (std::size_t jj = 0; jj < n; ++jj)
          c.check(rows[ii], j0 + jj, as_double(d(rows[ii], j0 + jj)), as_double(want[ii * n + jj]), magnitude[ii * n + jj],
                  relative, o.absolute);
    }
  });
  bound_check all;
  all.keep = o.max_reported;
  for (const bound_check& c : parts) all.merge(c);
  all.r.shape = s;
  all.r.operands = std::move(operands);
  all.r.relative_bound = relative;
  all.r.absolute_bound = o.absolute;
  all.r.rows_checked = m;
  return all.finish();
}

template <class Out>
constexpr const char* output_name() noexcept {
  return std::is_same_v<Out, float> ? "fp32" : "bf16";
}

// The reference's output value: the fp32 sum through ref::gemm's epilogue (alpha, then Out's rounding).
template <class Out>
Out reference_output(float sum, float alpha) {
  Out v{};
  store(matrix_view<Out>{&v, 1, 1}, 0, 0, sum, alpha, 0.0f);
  return v;
}
}  // namespace detail
namespace ref {

// MX x MX: a and b in any storage (tensor/foreign_layout.hpp: a foreign view with its buffers'
// sizes, or mxkit's own views and tensors); a's lines are D's rows, b's lines D's columns, both
// blocked along R.
template <foreign_viewable CopyA, foreign_viewable CopyB, class Out>
  requires gemm_output<std::remove_const_t<Out>>
gemm_validation_report validate_gemm(const CopyA& copy_a, const CopyB& copy_b, matrix_view<Out> d,
                                     const gemm_validate_options& o = {}) {
  using O = std::remove_const_t<Out>;
  const mx_foreign_view &a = foreign_view(copy_a), &b = foreign_view(copy_b);
  detail::check_foreign_view(a, "validate_gemm: A");
  detail::check_foreign_view(b, "validate_gemm: B");
  const gemm_shape s = detail::check_mx_gemm(a.layout, b.layout, "validate_gemm");
  detail::check_rotation(a.options, b.options, "validate_gemm");
  const matrix_view<const O> dd{d.data, d.rows, d.cols, d.ld};
  detail::check_gemm_output(dd, s);
  const std::vector<std::size_t> rows = detail::gemm_rows_to_check(s.p, o);
  const double rel = o.relative > 0 ? o.relative
                                    : gemm_relative_bound(true, s.r, o.accumulation, std::is_same_v<O, bfloat16>, o.alpha,
                                                          a.layout.block_size());
  const mx_tensor ga = to_mx_tensor(a, rows);
  const detail::decoded_mx A = detail::decode_mx(ga.view(), 1);
  const double abs_alpha = std::fabs(static_cast<double>(o.alpha));
  std::string names = std::string(format_name(a.layout.format)) + " x " + std::string(format_name(b.layout.format)) + " -> " +
                      detail::output_name<O>();
  // mxkit's own storage is read in place; any other is copied into it, a chunk at a time.
  const bool own_storage = b.line_major() && b.storage.data_ld == 0 && b.storage.padding_stored &&
                           (b.layout.format != formats::mxfp4 || b.storage.nibbles == nibble_order::low_first) &&
                           b.storage.scales == scale_layout::row_major && b.storage.scale_line_stride == 0 &&
                           b.storage.scale_padded.lines == 0 && b.storage.scale_padded.blocks == 0;
  return detail::check_gemm_rows(dd, s, rows, rel, o, std::move(names), [&](std::size_t j0, std::size_t n, O* want, double* mag) {
    mx_tensor copy;
    mx_const_view chunk;
    if (own_storage) {
      chunk = slice_lines(mx_const_view{b.layout, b.options, b.data.data(), b.scales.data()}, j0, n);
    } else {
      std::vector<std::size_t> lines(n);
      for (std::size_t j = 0; j < n; ++j) lines[j] = j0 + j;
      copy = to_mx_tensor(b, lines);
      chunk = std::as_const(copy).view();
    }
    const detail::decoded_mx B = detail::decode_mx(chunk, 1);
    for (std::size_t jj = 0; jj < n; ++jj)  // B's line outer: it is read once, A's few rows stay in cache
      for (std::size_t ii = 0; ii < A.lines; ++ii) {
        want[ii * n + jj] = detail::reference_output<O>(detail::mx_reference_sum(A, ii, B, jj), o.alpha);
        double sum = 0;
        for (std::size_t k = 0; k < A.blocks; ++k) {
          const double* x = &A.values[ii * A.length + k * A.block_size];
          const double* y = &B.values[jj * B.length + k * A.block_size];
          double block = 0;
          for (std::size_t e = 0; e < A.block_size; ++e) block += std::fabs(x[e] * y[e]);
          sum += block * std::fabs(A.scales[ii * A.blocks + k] * B.scales[jj * B.blocks + k]);
        }
        mag[ii * n + jj] = abs_alpha * sum;
      }
  });
}

// Per-tensor FP8: a [P,R] and b [Q,R] codes, value = code / scale.
template <class Out>
  requires gemm_output<std::remove_const_t<Out>>
gemm_validation_report validate_gemm(fp8_view a, fp8_view b, matrix_view<Out> d, const gemm_validate_options& o = {}) {
  using O = std::remove_const_t<Out>;
  detail::check_fp8_view(a, "validate_gemm", "A");
  detail::check_fp8_view(b, "validate_gemm", "B");
  const gemm_shape s = detail::check_tn(a.rows, a.cols, b.rows, b.cols, "validate_gemm");
  const matrix_view<const O> dd{d.data, d.rows, d.cols, d.ld};
  detail::check_gemm_output(dd, s);
  const std::vector<std::size_t> rows = detail::gemm_rows_to_check(s.p, o);
  const double rel = o.relative > 0 ? o.relative
                                    : gemm_relative_bound(false, s.r, o.accumulation, std::is_same_v<O, bfloat16>, o.alpha);
  const std::size_t r = s.r;
  std::vector<float> av(rows.size() * r);
  for (std::size_t ii = 0; ii < rows.size(); ++ii)
    for (std::size_t k = 0; k < r; ++k) av[ii * r + k] = fp8_decode(a.data[rows[ii] * r + k], a.type);
  const float descale = a.scale_inv() * b.scale_inv();
  const double abs_scale = std::fabs(static_cast<double>(o.alpha)) * static_cast<double>(descale);
  std::string names = std::string("fp8 ") + name_of(a.type) + " x " + name_of(b.type) + " -> " + detail::output_name<O>();
  return detail::check_gemm_rows(dd, s, rows, rel, o, std::move(names), [&](std::size_t j0, std::size_t n, O* want, double* mag) {
    std::vector<float> bv(n * r);
    for (std::size_t j = 0; j < n; ++j)
      for (std::size_t k = 0; k < r; ++k) bv[j * r + k] = fp8_decode(b.data[(j0 + j) * r + k], b.type);
    for (std::size_t jj = 0; jj < n; ++jj)
      for (std::size_t ii = 0; ii < rows.size(); ++ii) {
        want[ii * n + jj] =
            detail::reference_output<O>(detail::fp8_reference_sum(&av[ii * r], &bv[jj * r], r) * descale, o.alpha);
        double sum = 0;
        for (std::size_t k = 0; k < r; ++k) sum += std::fabs(static_cast<double>(av[ii * r + k]) * bv[jj * r + k]);
        mag[ii * n + jj] = abs_scale * sum;
      }
  });
}

// High precision: float, bf16 or fp16 matrices a [P,R] and b [Q,R] (any leading dimensions).
template <class TA, class TB, class Out>
  requires quantizer_input<TA> && quantizer_input<TB> && gemm_output<std::remove_const_t<Out>>
gemm_validation_report validate_gemm(matrix_view<TA> a, matrix_view<TB> b, matrix_view<Out> d, const gemm_validate_options& o = {}) {
  using O = std::remove_const_t<Out>;
  const gemm_shape s = detail::check_tn(a.rows, a.cols, b.rows, b.cols, "validate_gemm");
  detail::check_matrix(a, "validate_gemm: A");
  detail::check_matrix(b, "validate_gemm: B");
  const matrix_view<const O> dd{d.data, d.rows, d.cols, d.ld};
  detail::check_gemm_output(dd, s);
  const std::vector<std::size_t> rows = detail::gemm_rows_to_check(s.p, o);
  const double rel = o.relative > 0 ? o.relative
                                    : gemm_relative_bound(false, s.r, o.accumulation, std::is_same_v<O, bfloat16>, o.alpha);
  const double abs_alpha = std::fabs(static_cast<double>(o.alpha));
  const auto type_name = [](auto tag) {
    using T = std::remove_const_t<typename decltype(tag)::type>;
    return std::is_same_v<T, float> ? "fp32" : std::is_same_v<T, bfloat16> ? "bf16" : "fp16";
  };
  std::string names = std::string(type_name(std::type_identity<TA>{})) + " x " + type_name(std::type_identity<TB>{}) + " -> " +
                      detail::output_name<O>();
  return detail::check_gemm_rows(dd, s, rows, rel, o, std::move(names), [&](std::size_t j0, std::size_t n, O* want, double* mag) {
    for (std::size_t jj = 0; jj < n; ++jj)
      for (std::size_t ii = 0; ii < rows.size(); ++ii) {
        want[ii * n + jj] = detail::reference_output<O>(detail::hp_reference_sum(a, rows[ii], b, j0 + jj), o.alpha);
        double sum = 0;
        for (std::size_t k = 0; k < s.r; ++k)
          sum += std::fabs(static_cast<double>(load_float(a(rows[ii], k))) * load_float(b(j0 + jj, k)));
        mag[ii * n + jj] = abs_alpha * sum;
      }
  });
}

}  // namespace ref
MXKIT_END_NAMESPACE
