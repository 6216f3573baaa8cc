// SPDX-License-Identifier: Apache-2.0
// GPU layer kernels (include/mxkit/gpu/nn/) against the host reference kernels
// (include/mxkit/ref/nn/), for float and bfloat16 activations, on small and ragged shapes, with
// poisoned outputs (all-ones bytes: NaN in float and bf16, so an unwritten element fails).
//
// The oracle is the reference instantiated in double on the same input values (bf16 inputs
// widened exactly), so every bound below is the device's own error, stated as a multiple of
// float's unit roundoff u = 2^-24 (fp32 arithmetic and statistics) plus, for a bf16 output,
// bf16's unit roundoff 2^-8 (the one rounding of the stored result). A sum of n terms in
// float is off by at most about n u times the sum of the magnitudes (Higham, "Accuracy and
// Stability of Numerical Algorithms", 2002, section 4.2: gamma_n = n u / (1 - n u)); each
// bound names the n of its kernel's longest chain of roundings and doubles it for margin.
// Integer-exact results (embedding copies, float embedding gradients, skipped AdamW steps) are
// compared bit for bit. Reductions are also run twice and must give the same bits.
#include <mxkit/gpu/memory.hpp>
#include <mxkit/gpu/nn/adamw.hpp>
#include <mxkit/gpu/nn/cross_entropy.hpp>
#include <mxkit/gpu/nn/embedding.hpp>
#include <mxkit/gpu/nn/global_norm.hpp>
#include <mxkit/gpu/nn/rmsnorm.hpp>
#include <mxkit/gpu/nn/rope.hpp>
#include <mxkit/gpu/nn/swiglu.hpp>
#include <mxkit/ref/nn/adamw.hpp>
#include <mxkit/ref/nn/cross_entropy.hpp>
#include <mxkit/ref/nn/embedding.hpp>
#include <mxkit/ref/nn/rmsnorm.hpp>
#include <mxkit/ref/nn/rope.hpp>
#include <mxkit/ref/nn/swiglu.hpp>

#include <algorithm>
#include <cstddef>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <span>
#include <sstream>
#include <string>
#include <tuple>
#include <type_traits>
#include <vector>

#include "../catch.hpp"
#include "gpu_test_util.hpp"

namespace {

namespace gpu = mxkit::gpu;
using gpu_test::poisoned;
using gpu_test::same_bits;
using gpu_test::upload;
using mxkit::bfloat16;

constexpr double u32 = 0x1p-24;  // float's unit roundoff
// Unit roundoff of the stored output: 0 for float (already counted in the fp32 bound), 2^-8
// for bf16 (8 significant bits, round to nearest).
template <class T>
constexpr double out_u = std::is_same_v<T, float> ? 0.0 : 0x1p-8;

template <class T>
const char* type_name() {
  return std::is_same_v<T, float> ? "float" : "bfloat16";
}

template <class T>
double widen(T x) {
  if constexpr (std::is_same_v<T, float>) return x;
  else return x.to_float();
}
template <class T>
T narrow(double x) {
  if constexpr (std::is_same_v<T, float>) return static_cast<float>(x);
  else return bfloat16::from_float(static_cast<float>(x));
}
template <class T>
std::vector<double> widen(const std::vector<T>& v) {
  std::vector<double> out(v.size());
  for (std::size_t i = 0; i < v.size(); ++i) out[i] = widen(v[i]);
  return out;
}

// n values of T drawn from normal(mean, sd), and the same values widened to double.
template <class T>
struct values {
  std::vector<T> t;
  std::vector<double> d;
};
template <class T>
values<T> random_values(std::size_t n, std::uint64_t seed, double mean = 0.0, double sd = 1.0) {
  std::mt19937_64 gen(seed);
  std::normal_distribution<double> normal(mean, sd);
  values<T> v{std::vector<T>(n), std::vector<double>(n)};
  for (std::size_t i = 0; i < n; ++i) {
    v.t[i] = narrow<T>(normal(gen));
    v.d[i] = widen(v.t[i]);
  }
  return v;
}
template <class T>
values<T> from_doubles(const std::vector<double>& x) {
  values<T> v{std::vector<T>(x.size()), std::vector<double>(x.size())};
  for (std::size_t i = 0; i < x.size(); ++i) {
    v.t[i] = narrow<T>(x[i]);
    v.d[i] = widen(v.t[i]);
  }
  return v;
}

// "" when |got - want| <= bound for every element (NaN fails; equal infinities pass), else how
// many fail and the first.
inline std::string compare(const char* what, const std::vector<double>& got, const std::vector<double>& want,
                           const std::vector<double>& bound) {
  if (got.size() != want.size()) return std::string(what) + ": sizes differ";
  std::size_t bad = 0, first = 0;
  for (std::size_t i = 0; i < got.size(); ++i)
    if (!(std::fabs(got[i] - want[i]) <= bound[i]) && !(got[i] == want[i]) && bad++ == 0) first = i;
  if (bad == 0) return "";
  std::ostringstream s;
  s.precision(10);
  s << what << ": " << bad << " of " << got.size() << " outside the bound; first at " << first << ": device " << got[first]
    << ", reference " << want[first] << ", error " << std::fabs(got[first] - want[first]) << ", bound " << bound[first];
  return s.str();
}

inline bool bit_equal(float a, float b) { return mxkit::bit_cast<std::uint32_t>(a) == mxkit::bit_cast<std::uint32_t>(b); }

// ---------------------------------------------------------------------------------- RMSNorm

// Forward: the sum of squares is C / warp_size + N (a lane's chunks) + log2(warp_size) float
// roundings deep; rstd takes half its relative error plus 4 roundings (divide, add, sqrt,
// reciprocal), y two more. Bound: (C / 32 + 32) u relative (twice that chain for either warp
// width), plus the bf16 output rounding.
template <class T>
void check_rmsnorm_forward(std::size_t rows, std::size_t cols, std::uint64_t seed) {
  INFO(type_name<T>() << " rmsnorm forward " << rows << "x" << cols);
  auto x = random_values<T>(rows * cols, seed);
  for (std::size_t r = 0; r < rows; ++r)  // rows of very different scale: rstd over 6 decades
    for (std::size_t c = 0; c < cols; ++c) {
      const double scale = std::ldexp(1.0, static_cast<int>(r % 21) - 10);
      x.t[r * cols + c] = narrow<T>(x.d[r * cols + c] * scale);
      x.d[r * cols + c] = widen(x.t[r * cols + c]);
    }
  const auto w = random_values<T>(cols, seed + 1, 1.0, 0.5);
  const double eps = 1e-5;
  auto dx = upload(x.t), dw = upload(w.t);
  auto dy = poisoned<T>(rows * cols);
  auto drstd = poisoned<float>(rows);
  gpu::rmsnorm_forward(dx.data(), dw.data(), dy.data(), drstd.data(), rows, cols, eps);
  std::vector<double> y(rows * cols), rstd(rows);
  mxkit::ref::rmsnorm_forward(x.d.data(), w.d.data(), y.data(), rstd.data(), rows, cols, eps);
  const double rel = (static_cast<double>(cols) / 32 + 32) * u32;
  std::vector<double> by(y.size()), br(rows);
  for (std::size_t i = 0; i < y.size(); ++i) by[i] = (rel + out_u<T>) * std::fabs(y[i]);
  for (std::size_t r = 0; r < rows; ++r) br[r] = rel * rstd[r];
  CHECK(compare("y", widen(dy.to_host()), y, by) == "");
  CHECK(compare("rstd", widen(drstd.to_host()), rstd, br) == "");
}

// Backward: dx's dot product is a C-term float sum as the forward's (k <= C / 32 + 14 deep,
// 2 roundings a term), the coefficient r^3 dot / C 4 more, the update 5: (k + 10) u relative to
// the magnitudes |dx0| + |r w dy| + r^3 / C sum_i |w_i dy_i x_i| |x|; bound (C / 16 + 48) u. dw:
// each group sums its R = rmsnorm_group_rows rows (the row-per-warp kernel: each warp its rows,
// then the 8 warps' sums), the column reduction its G groups onto dw0: at most R + 8 + G + 2
// roundings relative to |dw0| + sum_r |dy x r|; bound (2 (R + 8 + G) + 16) u.
template <class T, class W>
void check_rmsnorm_backward(std::size_t rows, std::size_t cols, std::uint64_t seed, bool with_dw = true) {
  INFO(type_name<T>() << " rmsnorm backward " << rows << "x" << cols << ", dw " << (with_dw ? type_name<W>() : "none"));
  const auto x = random_values<T>(rows * cols, seed), dy = random_values<T>(rows * cols, seed + 1);
  const auto w = random_values<T>(cols, seed + 2, 1.0, 0.5);
  const auto dx0 = random_values<T>(rows * cols, seed + 3, 0.0, 0.1);
  const auto dw0 = random_values<W>(cols, seed + 4, 0.0, 0.1);
  std::vector<float> rstd_f(rows);
  std::vector<double> rstd_d(rows);
  {
    std::vector<double> y(rows * cols);
    mxkit::ref::rmsnorm_forward(x.d.data(), w.d.data(), y.data(), rstd_d.data(), rows, cols, 1e-5);
    for (std::size_t r = 0; r < rows; ++r) rstd_d[r] = rstd_f[r] = static_cast<float>(rstd_d[r]);
  }
  auto gx = upload(x.t), gdy = upload(dy.t), gw = upload(w.t), gdx = upload(dx0.t);
  auto gdw = upload(dw0.t);
  auto grstd = upload(rstd_f);
  gpu::device_buffer<float> ws(gpu::rmsnorm_backward_workspace(rows, cols));
  gpu::rmsnorm_backward(gdy.data(), gx.data(), gw.data(), grstd.data(), gdx.data(), with_dw ? gdw.data() : static_cast<W*>(nullptr), rows,
                        cols, std::span<float>(ws.data(), ws.size()));
  std::vector<double> dx = dx0.d, dw = dw0.d;
  mxkit::ref::rmsnorm_backward(dy.d.data(), x.d.data(), w.d.data(), rstd_d.data(), dx.data(), with_dw ? dw.data() : nullptr, rows, cols);
  std::vector<double> bdx(dx.size()), bdw(cols);
  const double rel_dx = (static_cast<double>(cols) / 16 + 48) * u32 + out_u<T>;
  for (std::size_t r = 0; r < rows; ++r) {
    const double s = rstd_d[r];
    double dot_abs = 0.0;
    for (std::size_t c = 0; c < cols; ++c) dot_abs += std::fabs(w.d[c] * dy.d[r * cols + c] * x.d[r * cols + c]);
    for (std::size_t c = 0; c < cols; ++c) {
      const std::size_t i = r * cols + c;
      bdx[i] = rel_dx * (std::fabs(dx0.d[i]) + std::fabs(s * w.d[c] * dy.d[i]) + s * s * s * dot_abs / static_cast<double>(cols) * std::fabs(x.d[i]));
    }
  }
  const double R = static_cast<double>(gpu::detail::rmsnorm_group_rows), groups = std::ceil(static_cast<double>(rows) / R);
  const double rel_dw = (2 * (R + 8 + groups) + 16) * u32 + out_u<W>;
  for (std::size_t c = 0; c < cols; ++c) {
    double mag = std::fabs(dw0.d[c]);
    for (std::size_t r = 0; r < rows; ++r) mag += std::fabs(dy.d[r * cols + c] * x.d[r * cols + c] * rstd_d[r]);
    bdw[c] = rel_dw * mag;
  }
  CHECK(compare("dx", widen(gdx.to_host()), dx, bdx) == "");
  if (with_dw) CHECK(compare("dw", widen(gdw.to_host()), dw, bdw) == "");
  else CHECK(same_bits(gdw.to_host(), dw0.t));  // a null dw: nothing written
  // The residual form, dx = dr + ..., into a poisoned dx that it must not read: the bits of the
  // accumulating form above.
  auto gdr = upload(dx0.t), gdx2 = poisoned<T>(rows * cols);
  auto gdw2 = upload(dw0.t);
  gpu::rmsnorm_backward(gdy.data(), gx.data(), gw.data(), grstd.data(), static_cast<const T*>(gdr.data()), gdx2.data(),
                        with_dw ? gdw2.data() : static_cast<W*>(nullptr), rows, cols, std::span<float>(ws.data(), ws.size()));
  CHECK(same_bits(gdx2.to_host(), gdx.to_host()));
  CHECK(same_bits(gdw2.to_host(), gdw.to_host()));
  CHECK(same_bits(gdr.to_host(), dx0.t));
}

// --------------------------------------------------------------------------------------- RoPE

// Each output is x1 c -+ x2 s with c, s rounded to float from the double values (1 rounding
// each) and 3 roundings of the products and sum: |error| <= 5 u (|x1| + |x2|); bound 8 u, plus
// the bf16 output rounding (|result| <= |x1| + |x2|).
template <class T>
void check_rope(const mxkit::nn::head_shape& s, double theta, std::uint64_t seed) {
  INFO(type_name<T>() << " rope batch " << s.batch << " seq " << s.seq << " heads " << s.n_heads << "/" << s.n_kv_heads << " dim "
                      << s.head_dim << " theta " << theta);
  const std::size_t n = s.tokens() * s.qkv_dim();
  const auto in = random_values<T>(n, seed);
  for (const bool inverse : {false, true}) {
    INFO("inverse " << inverse);
    auto dev = upload(in.t);
    gpu::rope(dev.data(), s, theta, inverse);
    std::vector<double> want = in.d;
    mxkit::ref::rope(want.data(), s, theta, inverse);
    std::vector<double> bound(n, 0.0);  // v heads: unchanged exactly
    const std::size_t D = s.head_dim, half = D / 2;
    for (std::size_t tok = 0; tok < s.tokens(); ++tok)
      for (std::size_t h = 0; h < s.n_heads + s.n_kv_heads; ++h)
        for (std::size_t i = 0; i < half; ++i) {
          const std::size_t a = tok * s.qkv_dim() + h * D + i, b = a + half;
          bound[a] = bound[b] = (8 * u32 + out_u<T>) * (std::fabs(in.d[a]) + std::fabs(in.d[b]));
        }
    const std::vector<T> got = dev.to_host();
    CHECK(compare("qkv", widen(got), want, bound) == "");
    {  // From a factor table (the device backend's path), one longer than seq: the same bits.
      gpu::device_buffer<gpu::rope_factor> table(gpu::rope_factors_size(s.seq + 3, s.head_dim));
      gpu::rope_factors(table.data(), s.seq + 3, s.head_dim, theta);
      auto dev2 = upload(in.t);
      gpu::rope(dev2.data(), s, theta, inverse, table.data());
      CHECK(same_bits(dev2.to_host(), got));
    }
    if (!inverse) {  // and back: two rotations' errors, the first turned by the second (<= (1 + sqrt 2) bound)
      gpu::rope(dev.data(), s, theta, true);
      std::vector<double> twice(bound);
      for (double& b : twice) b *= 3;
      CHECK(compare("round trip", widen(dev.to_host()), in.d, twice) == "");
    }
  }
}

// ------------------------------------------------------------------------------------- SwiGLU

// sigmoid(g) = 1 / (1 + expf(-g)): expf is within 2 ulp (CUDA's documented bound; HIP's is 1),
// so 1 + e is within 3 u and sig within 4 u; out = g / (1 + e) * u: 5 u relative, bound 16 u.
// dg's bracket 1 + g (1 - sig) forms 1 - sig from the rounded sig, an absolute error of 5 u |g|:
// dg is within 14 u |dout u sig| (1 + |g|), bound 32 u on that; du as out. Results below
// float's normal range carry an absolute 1e-37.
template <class T>
void check_swiglu(std::size_t rows, std::size_t f, std::uint64_t seed) {
  INFO(type_name<T>() << " swiglu " << rows << "x" << f);
  auto gu = random_values<T>(rows * 2 * f, seed, 0.0, 3.0);
  const double extremes[] = {0.0, -0.0, 30.0, -30.0, 100.0, -100.0, 1.0e-30, -1.2785};
  for (std::size_t k = 0; k < std::size(extremes) && k < rows * f; ++k) {  // gate values in the tails and at dg's zero
    const std::size_t i = (k * 7919) % (rows * f), r = i / f, j = i % f;
    gu.t[r * 2 * f + j] = narrow<T>(extremes[k]);
    gu.d[r * 2 * f + j] = widen(gu.t[r * 2 * f + j]);
  }
  const auto dout = random_values<T>(rows * f, seed + 1);
  auto ggu = upload(gu.t), gdout = upload(dout.t);
  auto gout = poisoned<T>(rows * f);
  auto gdgu = poisoned<T>(rows * 2 * f);
  gpu::swiglu_forward(ggu.data(), gout.data(), rows, f);
  gpu::swiglu_backward(gdout.data(), ggu.data(), gdgu.data(), rows, f);
  std::vector<double> out(rows * f), dgu(rows * 2 * f);
  mxkit::ref::swiglu_forward(gu.d.data(), out.data(), rows, f);
  mxkit::ref::swiglu_backward(dout.d.data(), gu.d.data(), dgu.data(), rows, f);
  const double rel = 16 * u32 + out_u<T>, tiny = 1e-37;
  std::vector<double> bout(out.size()), bdgu(dgu.size());
  for (std::size_t r = 0; r < rows; ++r)
    for (std::size_t j = 0; j < f; ++j) {
      const double g = gu.d[r * 2 * f + j], u = gu.d[r * 2 * f + f + j], d = dout.d[r * f + j], sig = 1.0 / (1.0 + std::exp(-g));
      bout[r * f + j] = rel * std::fabs(out[r * f + j]) + tiny;
      bdgu[r * 2 * f + j] = (2 * rel - out_u<T>) * std::fabs(d * u * sig) * (1.0 + std::fabs(g)) + tiny;
      bdgu[r * 2 * f + f + j] = rel * std::fabs(dgu[r * 2 * f + f + j]) + tiny;
    }
  CHECK(compare("out", widen(gout.to_host()), out, bout) == "");
  CHECK(compare("dgu", widen(gdgu.to_host()), dgu, bdgu) == "");
}

// ---------------------------------------------------------------------------------- Embedding

// Token ids in [0, vocab): a third of them one frequent id (long runs of equal ids in the backward
// scan), the rest uniform.
inline std::vector<std::int32_t> random_ids(std::size_t n, std::size_t vocab, std::uint64_t seed) {
  std::mt19937_64 gen(seed);
  std::uniform_int_distribution<std::int32_t> any(0, static_cast<std::int32_t>(vocab) - 1);
  std::vector<std::int32_t> ids(n);
  for (auto& id : ids) id = gen() % 3 == 0 ? static_cast<std::int32_t>(vocab / 3) : any(gen);
  return ids;
}

template <class T>
void check_embedding_forward(std::size_t n, std::size_t vocab, std::size_t cols, std::uint64_t seed) {
  INFO(type_name<T>() << " embedding forward n " << n << " vocab " << vocab << " cols " << cols);
  const auto table = random_values<T>(vocab * cols, seed);
  const std::vector<std::int32_t> ids = random_ids(n, vocab, seed + 1);
  auto gtable = upload(table.t);
  auto gids = upload(ids);
  auto gout = poisoned<T>(n * cols);
  gpu::device_buffer<int> err(1);
  err.fill_bytes(0);
  gpu::embedding_forward(gids.data(), n, gtable.data(), vocab, gout.data(), cols, err.data());
  std::vector<T> want(n * cols);
  mxkit::ref::embedding_forward(ids.data(), n, table.t.data(), want.data(), cols);
  CHECK(same_bits(gout.to_host(), want));
  CHECK(err.to_host()[0] == 0);
}

// Backward: float sums the same terms in the same order as the float reference (bit for bit);
// bf16 accumulates in float (count roundings) and rounds once: bound 2 (count + 1) u relative
// to |dtable0| plus the sum of the magnitudes added, plus the bf16 rounding.
template <class T>
void check_embedding_backward(std::size_t n, std::size_t vocab, std::size_t cols, std::uint64_t seed) {
  INFO(type_name<T>() << " embedding backward n " << n << " vocab " << vocab << " cols " << cols);
  const auto dout = random_values<T>(n * cols, seed);
  const auto table0 = random_values<T>(vocab * cols, seed + 1, 0.0, 0.1);
  const std::vector<std::int32_t> ids = random_ids(n, vocab, seed + 2);
  auto gdout = upload(dout.t), gtable = upload(table0.t);
  auto gids = upload(ids);
  gpu::device_buffer<int> err(1);
  err.fill_bytes(0);
  gpu::device_buffer<std::uint32_t> ws(gpu::embedding_backward_workspace(vocab));
  ws.fill_bytes(0xFF);  // the launcher zeroes it
  gpu::embedding_backward(gids.data(), n, gdout.data(), gtable.data(), vocab, cols, err.data(),
                          std::span<std::uint32_t>(ws.data(), ws.size()));
  const std::vector<T> got = gtable.to_host();
  CHECK(err.to_host()[0] == 0);
  if constexpr (std::is_same_v<T, float>) {
    std::vector<float> want = table0.t;
    mxkit::ref::embedding_backward(ids.data(), n, dout.t.data(), want.data(), cols);
    CHECK(same_bits(got, want));
  } else {
    std::vector<double> want = table0.d, mag(table0.d.size()), absd(dout.d.size());
    for (std::size_t i = 0; i < mag.size(); ++i) mag[i] = std::fabs(table0.d[i]);
    for (std::size_t i = 0; i < absd.size(); ++i) absd[i] = std::fabs(dout.d[i]);
    mxkit::ref::embedding_backward(ids.data(), n, dout.d.data(), want.data(), cols);
    mxkit::ref::embedding_backward(ids.data(), n, absd.data(), mag.data(), cols);
    std::vector<std::size_t> count(vocab, 0);
    for (const std::int32_t id : ids) ++count[static_cast<std::size_t>(id)];
    std::vector<double> bound(want.size());
    for (std::size_t i = 0; i < bound.size(); ++i)
      bound[i] = (2 * (static_cast<double>(count[i / cols]) + 1) * u32 + out_u<T>) * mag[i];
    CHECK(compare("dtable", widen(got), want, bound) == "");
  }
}

// ------------------------------------------------------------------------------ cross-entropy

// The normalizer s sums k = ceil(V / (256 N)) N terms per thread, each exp within 2 ulp and
// each rescaling one more exp and product, then 14 merges: (3 k + 32) u; each term's argument
// z - m is rounded too, an error of |z - M| u in that term, so s is also off by its
// softmax-weighted mean of M - z, times u. The loss adds the log's, the sum's and the target's
// roundings, 4 u (|lse| + |z_t|). The gradient's p = exp(z - M) / s carries s's error, exp's
// and its own |z - M| u. Bounds are twice those chains.
template <class T>
void check_cross_entropy(std::size_t rows, std::size_t vocab, std::uint64_t seed) {
  INFO(type_name<T>() << " cross-entropy rows " << rows << " vocab " << vocab);
  auto z = random_values<T>(rows * vocab, seed, 0.0, 3.0);
  for (std::size_t r = 1; r < rows; r += 3)  // shifted rows: the max must be subtracted
    for (std::size_t j = 0; j < vocab; ++j) {
      z.t[r * vocab + j] = narrow<T>(z.d[r * vocab + j] + 60.0);
      z.d[r * vocab + j] = widen(z.t[r * vocab + j]);
    }
  std::vector<std::int32_t> targets(rows);
  std::mt19937_64 gen(seed + 1);
  for (auto& t : targets) t = static_cast<std::int32_t>(gen() % vocab);
  auto gz = upload(z.t);
  auto gt = upload(targets);
  auto loss = poisoned<float>(1);
  auto ws = poisoned<float>(gpu::cross_entropy_workspace(rows));
  gpu::device_buffer<int> err(1);
  err.fill_bytes(0);
  // Loss only: logits untouched, then loss and gradient.
  gpu::cross_entropy(gz.data(), gt.data(), rows, vocab, false, loss.data(), err.data(), std::span<float>(ws.data(), ws.size()));
  const float loss_only = loss.to_host()[0];
  CHECK(same_bits(gz.to_host(), z.t));
  gpu::cross_entropy(gz.data(), gt.data(), rows, vocab, true, loss.data(), err.data(), std::span<float>(ws.data(), ws.size()));
  const float got_loss = loss.to_host()[0];
  std::vector<double> dz(rows * vocab);
  const double want_loss = mxkit::ref::cross_entropy(z.d.data(), targets.data(), dz.data(), rows, vocab);
  constexpr std::size_t N = 16 / sizeof(T);
  const double k = std::ceil(static_cast<double>(vocab) / (256.0 * N)) * N;
  double zmax = 0.0, worst_rel_s = 0.0;
  for (const double v : z.d) zmax = std::max(zmax, std::fabs(v));
  std::vector<double> bound(dz.size());
  for (std::size_t r = 0; r < rows; ++r) {
    const double* zr = z.d.data() + r * vocab;
    const double m = *std::max_element(zr, zr + vocab);
    double sum = 0.0, weighted = 0.0;
    for (std::size_t j = 0; j < vocab; ++j) {
      sum += std::exp(zr[j] - m);
      weighted += std::exp(zr[j] - m) * (m - zr[j]);
    }
    const double rel_s = (3 * k + 32 + weighted / sum) * u32;
    worst_rel_s = std::max(worst_rel_s, rel_s);
    for (std::size_t j = 0; j < vocab; ++j) {
      const std::size_t i = r * vocab + j;
      const double onehot = static_cast<std::size_t>(targets[r]) == j ? 1.0 : 0.0, p = dz[i] * static_cast<double>(rows) + onehot;
      bound[i] = (2 * (p * (rel_s + (m - zr[j] + 8) * u32) + u32 * (p + onehot)) + out_u<T> * std::fabs(p - onehot)) /
                 static_cast<double>(rows);
    }
  }
  const double loss_bound = 2 * (worst_rel_s + 4 * u32 * (2 * zmax + std::log(static_cast<double>(vocab))));
  INFO("loss: device " << got_loss << ", reference " << want_loss << ", bound " << loss_bound);
  CHECK(err.to_host()[0] == 0);
  CHECK(std::fabs(got_loss - want_loss) <= loss_bound);
  CHECK(bit_equal(got_loss, loss_only));
  CHECK(compare("dlogits", widen(gz.to_host()), dz, bound) == "");
}

// --------------------------------------------------------------------- global norm and AdamW

// Tensors of the given sizes, drawn from normal(mean, sd) as G (tensor k from seed + k, so its
// values do not depend on where it lies), one after another in one device buffer, each starting
// `offset` elements past a 16-byte boundary (offset != 0: the element-wise path); zeros between.
template <class G>
struct tensor_set {
  std::vector<std::size_t> sizes, starts;
  values<G> host;
  gpu::device_buffer<G> dev;
  const G* ptr(std::size_t k) const { return dev.data() + starts[k]; }
  G* ptr(std::size_t k) { return dev.data() + starts[k]; }
};
template <class G>
tensor_set<G> make_tensors(const std::vector<std::size_t>& sizes, std::size_t offset, std::uint64_t seed, double mean = 0.0, double sd = 1.0) {
  tensor_set<G> s;
  s.sizes = sizes;
  std::size_t at = 0;
  for (const std::size_t n : sizes) {
    at = (at + 7) / 8 * 8 + offset;  // 8 elements: a 16-byte multiple for float and bf16 alike
    s.starts.push_back(at);
    at += n;
  }
  s.host = values<G>{std::vector<G>(at, narrow<G>(0.0)), std::vector<double>(at, 0.0)};
  for (std::size_t k = 0; k < sizes.size(); ++k) {
    const values<G> v = random_values<G>(sizes[k], seed + k, mean, sd);
    std::copy(v.t.begin(), v.t.end(), s.host.t.begin() + static_cast<std::ptrdiff_t>(s.starts[k]));
    std::copy(v.d.begin(), v.d.end(), s.host.d.begin() + static_cast<std::ptrdiff_t>(s.starts[k]));
  }
  s.dev = upload(s.host.t);
  return s;
}

template <class G>
gpu::grad_norm_result run_global_norm(const tensor_set<G>& s, float max_norm) {
  std::vector<gpu::norm_tensor<G>> desc;
  for (std::size_t k = 0; k < s.sizes.size(); ++k) desc.push_back({s.ptr(k), s.sizes[k]});
  auto gdesc = upload(desc);
  gpu::device_buffer<double> ws(gpu::global_norm_workspace);
  auto out = poisoned<gpu::grad_norm_result>(1);
  gpu::global_norm(gdesc.data(), desc.size(), max_norm, out.data(), std::span<double>(ws.data(), ws.size()));
  return out.to_host()[0];
}

template <class G>
double host_norm(const tensor_set<G>& s) {
  double ss = 0.0;
  for (std::size_t k = 0; k < s.sizes.size(); ++k)
    for (std::size_t i = 0; i < s.sizes[k]; ++i) ss += s.host.d[s.starts[k] + i] * s.host.d[s.starts[k] + i];
  return std::sqrt(ss);
}

// Norm: squares exact in double, sums off by about 2^-53 n relative, then one rounding to
// float: bound 2 u. Clip: max_norm / norm in double (nn::clip_factor), rounded to float: 2 u.
template <class G>
void check_global_norm(std::size_t offset, std::uint64_t seed) {
  INFO(type_name<G>() << " global norm, offset " << offset);
  const auto s = make_tensors<G>({1, 7, 1000, 4099, 100003, 31}, offset, seed);
  const double want = host_norm(s);
  for (const float max_norm : {0.0f, 1.0f, 1.0e9f}) {
    const gpu::grad_norm_result got = run_global_norm(s, max_norm);
    INFO("max_norm " << max_norm << ": norm " << got.norm << " (reference " << want << "), clip " << got.clip);
    CHECK(std::fabs(got.norm - want) <= 2 * u32 * want);
    CHECK(got.nonfinite == 0);
    const double want_clip = max_norm > 0 && want > max_norm ? max_norm / want : 1.0;
    CHECK(std::fabs(got.clip - want_clip) <= 2 * u32 * want_clip);
  }
}

// AdamW: g' one rounding; m = b1 m + (1 - b1) g' three, relative to b1 |m0| + (1 - b1) |g'|;
// v likewise with g'^2 (four); the update's quotient carries m's and half v's error plus four
// roundings; p -= lr (...) two more. Bounds (twice or more): 8 u for m (4 u deep) and 16 u for
// v (6 u) on those magnitudes, 32 u for p (16 u) on |p0| + lr (A + wd |p0|), A = (b1 |m0| + (1 - b1) |g'|) / bc1 /
// (sqrt(v / bc2) + eps) (m's magnitude, not its value: m may cancel to near 0).
struct adamw_case {
  std::vector<std::size_t> sizes{1, 5, 1000, 4097, 33};
  std::vector<float> decay{0.0f, 0.1f, 0.01f, 0.1f, 0.0f};
  gpu::adamw_settings settings{0.9f, 0.95f, 1e-8f};
  float lr = 1e-3f;
  std::uint64_t taken = 4, skipped = 2;
};

template <class G>
struct adamw_state {
  tensor_set<float> p, m, v;
  tensor_set<G> g;
};

template <class G>
adamw_state<G> make_adamw_state(const adamw_case& c, std::size_t offset, std::uint64_t seed) {
  adamw_state<G> s{make_tensors<float>(c.sizes, offset, seed), make_tensors<float>(c.sizes, offset, seed + 100, 0.0, 1e-2),
                   make_tensors<float>(c.sizes, offset, seed + 200, 0.0, 1e-2), make_tensors<G>(c.sizes, offset, seed + 300)};
  for (std::size_t i = 0; i < s.v.host.t.size(); ++i) {  // second moments are >= 0
    s.v.host.t[i] = std::fabs(s.v.host.t[i]) * 1e-2f;
    s.v.host.d[i] = s.v.host.t[i];
  }
  s.v.dev.copy_from(std::span<const float>(s.v.host.t));
  return s;
}

template <class G>
void run_adamw(const adamw_case& c, adamw_state<G>& s, const gpu::grad_norm_result* norm, gpu::device_buffer<gpu::adamw_step_counts>& counts) {
  std::vector<gpu::adamw_tensor<G>> desc;
  for (std::size_t k = 0; k < c.sizes.size(); ++k)
    desc.push_back({s.p.ptr(k), s.g.ptr(k), s.m.ptr(k), s.v.ptr(k), c.sizes[k], c.decay[k]});
  auto gdesc = upload(desc);
  const std::vector<float> lr{c.lr};
  auto glr = upload(lr);
  gpu::adamw_update(gdesc.data(), desc.size(), glr.data(), norm, counts.data(), c.settings);
  MXKIT_GPU_CHECK(gpu::stream_synchronize(nullptr));
}

template <class G>
void check_adamw_against_reference(const adamw_case& c, const adamw_state<G>& before, const adamw_state<G>& after, float clip) {
  const std::vector<float> p = after.p.dev.to_host(), m = after.m.dev.to_host(), v = after.v.dev.to_host();
  mxkit::nn::adamw_hyper h;
  h.lr = c.lr;
  h.beta1 = c.settings.beta1;
  h.beta2 = c.settings.beta2;
  h.eps = c.settings.eps;
  h.grad_scale = clip;
  h.step = c.taken + 1;
  const double bc1 = 1.0 - std::pow(h.beta1, static_cast<double>(h.step)), bc2 = 1.0 - std::pow(h.beta2, static_cast<double>(h.step));
  for (std::size_t k = 0; k < c.sizes.size(); ++k) {
    INFO("tensor " << k << " of " << c.sizes[k] << " elements, decay " << c.decay[k]);
    const std::size_t at = before.p.starts[k], n = c.sizes[k];
    std::vector<double> wp(before.p.host.d.begin() + at, before.p.host.d.begin() + at + n);
    std::vector<double> wm(before.m.host.d.begin() + at, before.m.host.d.begin() + at + n);
    std::vector<double> wv(before.v.host.d.begin() + at, before.v.host.d.begin() + at + n);
    const std::vector<double> g(before.g.host.d.begin() + at, before.g.host.d.begin() + at + n);
    h.weight_decay = c.decay[k];
    mxkit::ref::adamw_update(wp.data(), g.data(), wm.data(), wv.data(), n, h);
    std::vector<double> bp(n), bm(n), bv(n), gp(n), gm(n), gv(n);
    for (std::size_t i = 0; i < n; ++i) {
      const double p0 = before.p.host.d[at + i], m0 = before.m.host.d[at + i], v0 = before.v.host.d[at + i], gc = std::fabs(g[i] * clip);
      const double mmag = h.beta1 * std::fabs(m0) + (1 - h.beta1) * gc;
      bm[i] = 8 * u32 * mmag;
      bv[i] = 16 * u32 * (h.beta2 * v0 + (1 - h.beta2) * gc * gc);
      const double a = mmag / bc1 / (std::sqrt(wv[i] / bc2) + h.eps);
      bp[i] = 32 * u32 * (std::fabs(p0) + h.lr * (a + h.weight_decay * std::fabs(p0)));
      gp[i] = p[at + i], gm[i] = m[at + i], gv[i] = v[at + i];
    }
    CHECK(compare("param", gp, wp, bp) == "");
    CHECK(compare("m", gm, wm, bm) == "");
    CHECK(compare("v", gv, wv, bv) == "");
  }
}

gpu::device_buffer<gpu::adamw_step_counts> make_counts(std::uint64_t taken, std::uint64_t skipped) {
  const std::vector<gpu::adamw_step_counts> c{{taken, skipped}};
  return upload(c);
}

template <class G>
void check_adamw(std::size_t offset, std::uint64_t seed) {
  INFO(type_name<G>() << " gradients, offset " << offset);
  const adamw_case c;
  const adamw_state<G> before = make_adamw_state<G>(c, offset, seed);
  // Clipping on: max_norm a quarter of the norm. global_norm feeds the update through device memory.
  adamw_state<G> after = make_adamw_state<G>(c, offset, seed);
  const float max_norm = static_cast<float>(host_norm(after.g) / 4);
  std::vector<gpu::norm_tensor<G>> desc;
  for (std::size_t k = 0; k < c.sizes.size(); ++k) desc.push_back({after.g.ptr(k), c.sizes[k]});
  auto gdesc = upload(desc);
  gpu::device_buffer<double> ws(gpu::global_norm_workspace);
  gpu::device_buffer<gpu::grad_norm_result> norm(1);
  gpu::global_norm(gdesc.data(), desc.size(), max_norm, norm.data(), std::span<double>(ws.data(), ws.size()));
  auto counts = make_counts(c.taken, c.skipped);
  run_adamw(c, after, norm.data(), counts);
  const gpu::grad_norm_result r = norm.to_host()[0];
  CHECK(r.nonfinite == 0);
  CHECK(r.clip < 0.3f);
  check_adamw_against_reference(c, before, after, r.clip);
  const gpu::adamw_step_counts n = counts.to_host()[0];
  CHECK(n.taken == c.taken + 1);
  CHECK(n.skipped == c.skipped);
  // No norm: clip 1.
  adamw_state<G> plain = make_adamw_state<G>(c, offset, seed);
  auto counts2 = make_counts(c.taken, c.skipped);
  run_adamw(c, plain, nullptr, counts2);
  check_adamw_against_reference(c, before, plain, 1.0f);
}

}  // namespace

TEST_CASE("gpu rmsnorm forward: equals the reference on ragged shapes", "[gpu][nn]") {
  const std::size_t shapes[][2] = {{1, 1}, {3, 7}, {37, 65}, {9, 64}, {130, 1000}, {19, 4096}, {5, 4099}};
  std::uint64_t seed = 100;
  for (const auto& s : shapes) {
    check_rmsnorm_forward<float>(s[0], s[1], seed++);
    check_rmsnorm_forward<bfloat16>(s[0], s[1], seed++);
  }
}

TEST_CASE("gpu rmsnorm backward: dx and a deterministic dw equal the reference", "[gpu][nn]") {
  // Row-per-warp kernels up to 768 bf16 or 384 float columns (3 chunks a lane), the group
  // kernel beyond: {300, 768} is the training models' width over 19 groups, {40, 520} takes
  // 3 chunks (bf16) or the group kernel (float), {17, 770} just past the row kernels.
  const std::size_t shapes[][2] = {{1, 1}, {3, 7}, {33, 65}, {64, 64}, {100, 1000}, {70, 2050}, {300, 768}, {40, 520}, {17, 770}};
  std::uint64_t seed = 200;
  for (const auto& s : shapes) {
    check_rmsnorm_backward<float, float>(s[0], s[1], seed++);
    check_rmsnorm_backward<bfloat16, bfloat16>(s[0], s[1], seed++);
    check_rmsnorm_backward<bfloat16, float>(s[0], s[1], seed++);
  }
  check_rmsnorm_backward<float, float>(45, 130, seed++, false);
  check_rmsnorm_backward<bfloat16, bfloat16>(45, 130, seed++, false);
}

TEST_CASE("gpu rope: forward and inverse equal the reference; v heads untouched", "[gpu][nn]") {
  using hs = mxkit::nn::head_shape;
  // 12 + 3 rotated heads: full batches of rope_batch heads and a partial one; head_dim 6 and 2:
  // a partial group of rope_pairs pairs, and halves not aligned for vector accesses.
  const hs shapes[] = {hs{2, 5, 4, 2, 8},  hs{1, 37, 3, 1, 64},     hs{3, 17, 2, 2, 6},
                       hs{1, 3, 1, 1, 2},  hs{1, 2000, 1, 1, 128}, hs{2, 9, 12, 3, 16}};
  std::uint64_t seed = 300;
  for (const hs& s : shapes)
    for (const double theta : {10000.0, 500000.0}) {
      check_rope<float>(s, theta, seed++);
      check_rope<bfloat16>(s, theta, seed++);
    }
}

TEST_CASE("gpu swiglu: forward and backward equal the reference, odd widths", "[gpu][nn]") {
  const std::size_t shapes[][2] = {{1, 1}, {3, 7}, {17, 33}, {64, 1024}, {5, 1001}};
  std::uint64_t seed = 400;
  for (const auto& s : shapes) {
    check_swiglu<float>(s[0], s[1], seed++);
    check_swiglu<bfloat16>(s[0], s[1], seed++);
  }
}

TEST_CASE("gpu embedding: forward copies rows, backward adds in token order", "[gpu][nn]") {
  // Tokens past one scan tile (embedding_scan_ids): a byte vocabulary, and three rows hit by
  // nearly every lane of every ballot.
  const std::size_t shapes[][3] = {{1, 1, 1},      {5, 3, 7},        {300, 50, 64},  {1000, 37, 1000},
                                   {257, 1001, 9}, {40, 8, 2050},    {5000, 256, 100}, {2100, 3, 40}};
  std::uint64_t seed = 500;
  for (const auto& s : shapes) {
    check_embedding_forward<float>(s[0], s[1], s[2], seed++);
    check_embedding_forward<bfloat16>(s[0], s[1], s[2], seed++);
    check_embedding_backward<float>(s[0], s[1], s[2], seed++);
    check_embedding_backward<bfloat16>(s[0], s[1], s[2], seed++);
  }
}

TEST_CASE("gpu embedding: an out-of-range id sets the flag, reads nothing outside the table", "[gpu][nn]") {
  const std::size_t vocab = 10, cols = 12, n = 6;
  const auto table = random_values<float>(vocab * cols, 600);
  const std::vector<std::int32_t> ids{3, -1, 9, 10, 2147483647, 3};
  auto gtable = upload(table.t);
  auto gids = upload(ids);
  auto out = poisoned<float>(n * cols);
  gpu::device_buffer<int> err(1);
  err.fill_bytes(0);
  gpu::embedding_forward(gids.data(), n, gtable.data(), vocab, out.data(), cols, err.data());
  CHECK(err.to_host()[0] == 1);
  const std::vector<float> got = out.to_host();
  for (std::size_t i = 0; i < n; ++i)
    for (std::size_t c = 0; c < cols; ++c) {
      const bool valid = ids[i] >= 0 && static_cast<std::size_t>(ids[i]) < vocab;
      const float want = valid ? table.t[static_cast<std::size_t>(ids[i]) * cols + c] : 0.0f;
      CHECK(bit_equal(got[i * cols + c], want));
    }
  // Backward: the valid ids still add, in order; the flag is sticky (cleared only by the caller).
  const auto dout = random_values<float>(n * cols, 601);
  auto gdout = upload(dout.t);
  auto dtable = upload(table.t);
  gpu::device_buffer<std::uint32_t> ws(vocab);
  err.fill_bytes(0);
  gpu::embedding_backward(gids.data(), n, gdout.data(), dtable.data(), vocab, cols, err.data(), std::span<std::uint32_t>(ws.data(), ws.size()));
  CHECK(err.to_host()[0] == 1);
  std::vector<float> want = table.t;
  for (std::size_t i = 0; i < n; ++i)
    if (ids[i] >= 0 && static_cast<std::size_t>(ids[i]) < vocab)
      for (std::size_t c = 0; c < cols; ++c) want[static_cast<std::size_t>(ids[i]) * cols + c] += dout.t[i * cols + c];
  CHECK(same_bits(dtable.to_host(), want));
  // Valid ids leave a set flag set.
  const std::vector<std::int32_t> good{1, 2};
  auto ggood = upload(good);
  gpu::embedding_forward(ggood.data(), 2, gtable.data(), vocab, out.data(), cols, err.data());
  CHECK(err.to_host()[0] == 1);
}

TEST_CASE("gpu cross-entropy: loss and in-place gradient equal the reference", "[gpu][nn]") {
  const std::size_t shapes[][2] = {{1, 1}, {1, 2}, {7, 17}, {64, 1000}, {5, 50257}, {33, 4099}};
  std::uint64_t seed = 700;
  for (const auto& s : shapes) {
    check_cross_entropy<float>(s[0], s[1], seed++);
    check_cross_entropy<bfloat16>(s[0], s[1], seed++);
  }
}

TEST_CASE("gpu cross-entropy: a target outside the vocabulary sets the flag and a NaN loss", "[gpu][nn]") {
  const std::size_t rows = 3, vocab = 5;
  const auto z = random_values<float>(rows * vocab, 800);
  const std::vector<std::int32_t> targets{1, 5, 0};
  auto gz = upload(z.t);
  auto gt = upload(targets);
  gpu::device_buffer<float> loss(1), ws(rows);
  gpu::device_buffer<int> err(1);
  err.fill_bytes(0);
  gpu::cross_entropy(gz.data(), gt.data(), rows, vocab, true, loss.data(), err.data(), std::span<float>(ws.data(), ws.size()));
  CHECK(err.to_host()[0] == 1);
  CHECK(std::isnan(loss.to_host()[0]));
  const std::vector<float> g = gz.to_host();
  double row1 = 0.0;  // the bad row's gradient is the softmax alone: it sums to 1 / rows
  for (std::size_t j = 0; j < vocab; ++j) row1 += g[vocab + j];
  CHECK(std::fabs(row1 - 1.0 / rows) < 1e-6);
}

TEST_CASE("gpu global norm: equals the double norm, clip factor, aligned or not", "[gpu][nn]") {
  for (const std::size_t offset : {0, 1, 3}) {
    check_global_norm<float>(offset, 900 + offset);
    check_global_norm<bfloat16>(offset, 910 + offset);
  }
}

TEST_CASE("gpu global norm: an Inf or NaN gradient is flagged", "[gpu][nn]") {
  for (const float bad : {std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(), std::numeric_limits<float>::quiet_NaN()}) {
    auto s = make_tensors<float>({100, 5000}, 0, 920);
    s.host.t[s.starts[1] + 4321] = bad;
    s.dev.copy_from(std::span<const float>(s.host.t));
    const gpu::grad_norm_result r = run_global_norm(s, 1.0f);
    INFO("bad value " << bad);
    CHECK(r.nonfinite == 1);
    CHECK(r.clip == 1.0f);
  }
}

TEST_CASE("gpu adamw: one multi-tensor update equals the reference, clip and lr from the device", "[gpu][nn]") {
  for (const std::size_t offset : {0, 1}) {
    check_adamw<float>(offset, 1000 + offset);
    check_adamw<bfloat16>(offset, 1010 + offset);
  }
}

TEST_CASE("gpu adamw: a non-finite norm skips the step, nothing written", "[gpu][nn]") {
  const adamw_case c;
  adamw_state<float> s = make_adamw_state<float>(c, 0, 1100);
  s.g.host.t[s.g.starts[2] + 17] = std::numeric_limits<float>::quiet_NaN();
  s.g.dev.copy_from(std::span<const float>(s.g.host.t));
  std::vector<gpu::norm_tensor<float>> desc;
  for (std::size_t k = 0; k < c.sizes.size(); ++k) desc.push_back({s.g.ptr(k), c.sizes[k]});
  auto gdesc = upload(desc);
  gpu::device_buffer<double> ws(gpu::global_norm_workspace);
  gpu::device_buffer<gpu::grad_norm_result> norm(1);
  gpu::global_norm(gdesc.data(), desc.size(), 1.0f, norm.data(), std::span<double>(ws.data(), ws.size()));
  auto counts = make_counts(c.taken, c.skipped);
  run_adamw(c, s, norm.data(), counts);
  CHECK(norm.to_host()[0].nonfinite == 1);
  CHECK(same_bits(s.p.dev.to_host(), s.p.host.t));
  CHECK(same_bits(s.m.dev.to_host(), s.m.host.t));
  CHECK(same_bits(s.v.dev.to_host(), s.v.host.t));
  const gpu::adamw_step_counts n = counts.to_host()[0];
  CHECK(n.taken == c.taken);
  CHECK(n.skipped == c.skipped + 1);
}

TEST_CASE("gpu layer kernels: the same inputs give the same bits, run after run and at any alignment", "[gpu][nn]") {
  SECTION("rmsnorm") {
    const std::size_t rows = 1000, cols = 2048;
    const auto x = random_values<bfloat16>(rows * cols, 1200), dy = random_values<bfloat16>(rows * cols, 1201);
    const auto w = random_values<bfloat16>(cols, 1202, 1.0, 0.5);
    gpu::device_buffer<float> ws(gpu::rmsnorm_backward_workspace(rows, cols));
    // The same values `off` elements into their buffers (off 1: off the 16-byte grid, so every
    // access is element by element); outputs as far in.
    auto shifted = [](const std::vector<bfloat16>& v, std::size_t off) {
      std::vector<bfloat16> out(off, bfloat16{});
      out.insert(out.end(), v.begin(), v.end());
      return out;
    };
    auto run = [&](std::size_t off) {
      auto gx = upload(shifted(x.t, off)), gdy = upload(shifted(dy.t, off)), gw = upload(shifted(w.t, off));
      auto y = poisoned<bfloat16>(rows * cols + off);
      auto rstd = poisoned<float>(rows);
      gpu::rmsnorm_forward(gx.data() + off, gw.data() + off, y.data() + off, rstd.data(), rows, cols, 1e-5);
      gpu::device_buffer<bfloat16> dx(rows * cols + off);
      dx.fill_bytes(0);
      gpu::device_buffer<float> dw(cols);
      dw.fill_bytes(0);
      gpu::rmsnorm_backward(gdy.data() + off, gx.data() + off, gw.data() + off, rstd.data(), dx.data() + off, dw.data(), rows, cols,
                            std::span<float>(ws.data(), ws.size()));
      std::vector<bfloat16> yh = y.to_host(), dxh = dx.to_host();
      yh.erase(yh.begin(), yh.begin() + static_cast<std::ptrdiff_t>(off));
      dxh.erase(dxh.begin(), dxh.begin() + static_cast<std::ptrdiff_t>(off));
      return std::make_tuple(yh, rstd.to_host(), dxh, dw.to_host());
    };
    const auto a = run(0), b = run(0), c = run(1);
    CHECK(same_bits(std::get<0>(a), std::get<0>(b)));
    CHECK(same_bits(std::get<1>(a), std::get<1>(b)));
    CHECK(same_bits(std::get<2>(a), std::get<2>(b)));
    CHECK(same_bits(std::get<3>(a), std::get<3>(b)));
    CHECK(same_bits(std::get<0>(a), std::get<0>(c)));
    CHECK(same_bits(std::get<1>(a), std::get<1>(c)));
    CHECK(same_bits(std::get<2>(a), std::get<2>(c)));
    CHECK(same_bits(std::get<3>(a), std::get<3>(c)));
  }
  SECTION("cross-entropy") {
    const std::size_t rows = 64, vocab = 32000;
    const auto z = random_values<float>(rows * vocab, 1210, 0.0, 4.0);
    std::vector<std::int32_t> targets(rows);
    for (std::size_t r = 0; r < rows; ++r) targets[r] = static_cast<std::int32_t>((r * 7919) % vocab);
    auto gt = upload(targets);
    gpu::device_buffer<float> ws(rows), loss(1);
    gpu::device_buffer<int> err(1);
    err.fill_bytes(0);
    auto run = [&] {
      auto gz = upload(z.t);
      gpu::cross_entropy(gz.data(), gt.data(), rows, vocab, true, loss.data(), err.data(), std::span<float>(ws.data(), ws.size()));
      return std::make_pair(loss.to_host(), gz.to_host());
    };
    const auto a = run(), b = run();
    CHECK(same_bits(a.first, b.first));
    CHECK(same_bits(a.second, b.second));
  }
  SECTION("global norm") {
    const auto s0 = make_tensors<float>({3000000, 17, 500001}, 0, 1220), s1 = make_tensors<float>({3000000, 17, 500001}, 1, 1220);
    const gpu::grad_norm_result a = run_global_norm(s0, 1.0f), b = run_global_norm(s0, 1.0f), c = run_global_norm(s1, 1.0f);
    CHECK(bit_equal(a.norm, b.norm));
    CHECK(bit_equal(a.clip, b.clip));
    CHECK(bit_equal(a.norm, c.norm));  // the same values one element off the 16-byte grid
  }
  SECTION("embedding backward") {
    const std::size_t n = 8192, vocab = 1000, cols = 512;
    const auto dout = random_values<bfloat16>(n * cols, 1230);
    const std::vector<std::int32_t> ids = random_ids(n, vocab, 1231);
    auto gdout = upload(dout.t);
    auto gids = upload(ids);
    gpu::device_buffer<std::uint32_t> ws(vocab);
    gpu::device_buffer<int> err(1);
    err.fill_bytes(0);
    auto run = [&] {
      gpu::device_buffer<bfloat16> t(vocab * cols);
      t.fill_bytes(0);
      gpu::embedding_backward(gids.data(), n, gdout.data(), t.data(), vocab, cols, err.data(), std::span<std::uint32_t>(ws.data(), ws.size()));
      return t.to_host();
    };
    CHECK(same_bits(run(), run()));
    CHECK(err.to_host()[0] == 0);
  }
}

TEST_CASE("gpu layer kernels: bad arguments are rejected before any launch", "[gpu][nn]") {
  gpu::device_buffer<float> f(64);
  gpu::device_buffer<int> i(4);
  gpu::device_buffer<std::uint32_t> u(4);
  CHECK_THROWS_WITH(gpu::rmsnorm_backward(f.data(), f.data(), f.data(), f.data(), f.data(), f.data(), 40, 1, std::span<float>(f.data(), 1)),
                    mxkit_test::contains("workspace of 1 floats, need " + std::to_string(gpu::rmsnorm_backward_workspace(40, 1))));
  CHECK(gpu::rmsnorm_backward_workspace(40, 1) >= 2);  // 40 rows make more than one group
  CHECK_THROWS_WITH(gpu::rmsnorm_forward(f.data(), f.data(), f.data(), f.data(), 1, 1, -1.0), mxkit_test::contains("eps"));
  CHECK_THROWS_WITH(gpu::rope(f.data(), mxkit::nn::head_shape{1, 1, 1, 1, 3}, 10000.0, false), mxkit_test::contains("head_dim 3"));
  CHECK_THROWS_WITH(gpu::cross_entropy(f.data(), i.data(), 0, 4, true, f.data(), i.data(), std::span<float>(f.data(), 1)),
                    mxkit_test::contains("rows is 0"));
  CHECK_THROWS_WITH(gpu::embedding_backward(i.data(), 4, f.data(), f.data(), 8, 2, i.data(), std::span<std::uint32_t>(u.data(), 4)),
                    mxkit_test::contains("need 8"));
  CHECK_THROWS_WITH(gpu::adamw_update(static_cast<const gpu::adamw_tensor<float>*>(nullptr), 0, f.data(), nullptr,
                                      reinterpret_cast<gpu::adamw_step_counts*>(u.data()), gpu::adamw_settings{1.0f, 0.95f, 1e-8f}),
                    mxkit_test::contains("betas"));
  CHECK_THROWS_WITH(gpu::global_norm(static_cast<const gpu::norm_tensor<float>*>(nullptr), 0, 1.0f, nullptr, std::span<double>()),
                    mxkit_test::contains("null output"));
}
