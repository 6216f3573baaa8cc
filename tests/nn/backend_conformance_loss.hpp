// SPDX-License-Identifier: Apache-2.0
#pragma once
// The conformance suite's cases for the loss over chunks of rows with a loss mask
// (nn::backend::cross_entropy_rows, ref/nn/cross_entropy.hpp) and for Llama 3.1's RoPE scaling
// (nn/rope_frequencies.hpp), beside backend_conformance.hpp's (which this header extends and
// includes; a header of its own: that one is long enough). One more macro line per subject:
//
//   MXKIT_BACKEND_LOSS_CONFORMANCE_TESTS(my_subject, "my backend", "[my][nn][backend]")
//
// instantiated for ref::host_backend (tests/host/catch2_test_backend_conformance.cpp) and for the
// device backend (tests/gpu/catch2_test_device_backend.cu).
//
// What is compared:
//   - cross_entropy with a loss mask (none, some rows out, every row out) against the oracle,
//     within backend_conformance::cross_entropy's bounds with N = max(1, counted rows) in place of
//     the rows; a row the mask leaves out has a zero gradient and contributes nothing, exactly,
//     whatever its logits (NaN here);
//   - the same rows a chunk at a time (cross_entropy_rows, chunks of 1, 8 and 13 rows: ragged):
//     the backend's own unchunked loss and gradient, bit for bit (each row's arithmetic is the
//     same in any chunk, and the mean adds the whole batch's row losses in one order), and a
//     loss-only pass leaves the logits untouched;
//   - rope with Llama 3.1's scaling (theta 500000, head dim 128, and a short original context that
//     puts the blend band inside small heads) within rope's bound, one backend rotating with
//     several frequency sets in turn (a device backend keeps a table of factors: a stale one fails).
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "backend_conformance.hpp"

namespace backend_conformance {

// Bounds of a masked cross-entropy (rows, V) with gradient denominator N: those of
// cross_entropy<S>() (the device kernel's rel_s, the loss and gradient terms), zero for rows the
// mask leaves out.
struct cross_entropy_bound {
  std::vector<double> gradient;
  double loss = 0.0;
};
inline cross_entropy_bound masked_cross_entropy_bound(const std::vector<double>& zs, const std::vector<std::int32_t>& tg,
                                                      const std::vector<std::int32_t>& mask, std::size_t rows, std::size_t V, dtype t,
                                                      double N) {
  const double n = t == dtype::bf16 ? 8 : 4, k = std::ceil(static_cast<double>(V) / (256.0 * n)) * n;
  const double out_u = t == dtype::bf16 ? u16 : 0.0;
  double zmax = 0.0, worst_rel_s = 0.0;
  cross_entropy_bound b;
  b.gradient.assign(rows * V, 0.0);
  for (std::size_t r = 0; r < rows; ++r) {
    if (!mask.empty() && mask[r] == 0) continue;
    const double* zr = zs.data() + r * V;
    const double m = *std::max_element(zr, zr + V);
    double sum = 0.0, weighted = 0.0;
    for (std::size_t j = 0; j < V; ++j) {
      zmax = std::max(zmax, std::fabs(zr[j]));
      sum += std::exp(zr[j] - m);
      weighted += std::exp(zr[j] - m) * (m - zr[j]);
    }
    const double rel_s = (3 * k + 32 + weighted / sum) * u32;
    worst_rel_s = std::max(worst_rel_s, rel_s);
    for (std::size_t j = 0; j < V; ++j) {
      const double onehot = static_cast<std::size_t>(tg[r]) == j ? 1.0 : 0.0, p = std::exp(zr[j] - m) / sum;
      b.gradient[r * V + j] = (2 * (p * (rel_s + (m - zr[j] + 8) * u32) + u32 * (p + onehot)) + 2 * out_u * std::fabs(p - onehot) +
                               (u32 + out_u) * std::fabs(p - onehot)) /
                              N;
    }
  }
  b.loss = 2 * (worst_rel_s + 4 * u32 * (2 * zmax + std::log(static_cast<double>(V))));
  return b;
}

// Cross-entropy with a loss mask, whole and in chunks of rows.
template <class S>
void cross_entropy_masked_chunks() {
  tally tl;
  const std::size_t shapes[][2] = {{29, 37}, {67, 256}, {33, 4099}};
  std::uint64_t seed = 9000;
  for (const auto& sh : shapes)
    for (const dtype t : {dtype::f32, dtype::bf16})
      for (const int masking : {0, 1, 2}) {  // no mask, some rows out, every row out
        const std::size_t rows = sh[0], V = sh[1];
        INFO(name_of(t) << " cross-entropy " << rows << "x" << V << (masking == 0 ? "" : masking == 1 ? ", some rows masked" : ", all masked"));
        host_backend h;
        const auto made = S::make();
        auto& d = *made;
        std::vector<std::int32_t> mask, tg(rows);
        std::mt19937_64 gen(seed++);
        for (auto& x : tg) x = static_cast<std::int32_t>(gen() % V);
        if (masking > 0) {
          mask.assign(rows, 0);
          if (masking == 1)
            for (std::size_t r = 0; r < rows; ++r) mask[r] = r % 3 == 1 ? 0 : 1;
        }
        std::vector<double> zv = normals(rows * V, seed++, 0.0, 3.0);
        for (std::size_t r = 1; r < rows; r += 4)
          for (std::size_t j = 0; j < V; ++j) zv[r * V + j] += 60.0;  // the max must be subtracted
        for (std::size_t r = 0; r < rows; ++r)
          if (!mask.empty() && mask[r] == 0) zv[r * V] = nan_value;  // never read into anything
        double N = 0.0;
        for (std::size_t r = 0; r < rows; ++r) N += mask.empty() || mask[r] ? 1.0 : 0.0;
        N = std::max(N, 1.0);
        const twin targets = make_tokens(h, d, tg, V);
        const twin m = masking > 0 ? make_tokens(h, d, mask, 2) : twin{};
        const tensor* mh = masking > 0 ? &m.h : nullptr;
        const tensor* md = masking > 0 ? &m.d : nullptr;
        twin z = make_twin(h, d, rows, V, t, zv), loss = make_twin(h, d, 1, 1, dtype::f64);
        const std::vector<double> zs = h.read(z.h);
        const cross_entropy_bound b = masked_cross_entropy_bound(zs, tg, mask, rows, V, t, N);
        h.cross_entropy(z.h, targets.h, loss.h, true, mh);
        d.cross_entropy(z.d, targets.d, loss.d, true, md);
        const double device_loss = d.read_scalar(loss.d);
        CHECK(within(tl, "masked cross-entropy loss", {device_loss}, h.read(loss.h), {b.loss}) == "");
        const std::vector<double> device_grad = d.read(z.d);
        CHECK(within(tl, std::string("masked cross-entropy gradient ") + name_of(t), device_grad, h.read(z.h), b.gradient) == "");
        if (masking == 2) CHECK(device_loss == 0.0);
        for (std::size_t r = 0; r < rows; ++r)
          if (!mask.empty() && mask[r] == 0)
            for (std::size_t j = 0; j < V; ++j) CHECK(device_grad[r * V + j] == 0.0);
        // The same a chunk of rows at a time: the backend's own unchunked bits.
        for (const std::size_t chunk : {std::size_t{1}, std::size_t{8}, std::size_t{13}}) {
          INFO("chunks of " << chunk);
          tensor row_loss = d.alloc(rows, 1, dtype::f64, mem_tag::activation), chunked = d.scalar(), loss_only = d.scalar();
          std::vector<double> grad;
          for (std::size_t r0 = 0; r0 < rows; r0 += chunk) {
            const std::size_t n = std::min(chunk, rows - r0);
            const std::vector<double> part(zs.begin() + static_cast<std::ptrdiff_t>(r0 * V), zs.begin() + static_cast<std::ptrdiff_t>((r0 + n) * V));
            tensor zc = d.alloc(n, V, t, mem_tag::activation);
            d.write(zc, part);
            d.cross_entropy_rows(zc, targets.d, md, r0, &row_loss, r0 + n == rows ? &loss_only : nullptr, false);
            CHECK(same_values("logits of a loss-only chunk", d.read(zc), part) == "");
            d.cross_entropy_rows(zc, targets.d, md, r0, &row_loss, r0 + n == rows ? &chunked : nullptr, true);
            const std::vector<double> g = d.read(zc);
            grad.insert(grad.end(), g.begin(), g.end());
          }
          CHECK(same_values("chunked loss", {d.read_scalar(chunked)}, {device_loss}) == "");
          CHECK(same_values("loss-only chunked loss", {d.read_scalar(loss_only)}, {device_loss}) == "");
          CHECK(same_values("chunked gradient", grad, device_grad) == "");
        }
      }
  WARN("masked and chunked cross-entropy, worst error / bound:" << tl.str());
}

// Rope with Llama 3.1's frequency scaling.
template <class S>
void rope_scaled() {
  // Bound: rope<S>()'s, 16 u32 (|x1| + |x2|) (+ 2 u16 of it for bf16): the frequency is one more
  // double expression of the same function on both sides.
  tally tl;
  const head_shape shapes[] = {{2, 70, 4, 2, 128}, {1, 37, 3, 1, 64}, {3, 17, 2, 2, 16}};
  const rope_frequencies sets[] = {{500000.0, llama3_1_rope_scaling}, {10000.0, {}}, {10000.0, {8.0, 1.0, 4.0, 32.0}}};
  std::uint64_t seed = 9500;
  for (const dtype t : {dtype::f32, dtype::bf16}) {
    host_backend h;
    const auto made = S::make();
    auto& d = *made;  // one backend for every shape and frequency set, in turn
    for (const head_shape& s : shapes)
      for (const rope_frequencies& f : sets)
        for (const bool inverse : {false, true}) {
          INFO(name_of(t) << " rope seq " << s.seq << " dim " << s.head_dim << " theta " << f.theta << " scaling factor " << f.scaling.factor
                          << " context " << f.scaling.original_max_position << (inverse ? " inverse" : ""));
          twin x = make_twin(h, d, s.tokens(), s.qkv_dim(), t, normals(s.tokens() * s.qkv_dim(), seed++));
          const std::vector<double> in = h.read(x.h);
          h.rope(x.h, s, f, inverse);
          d.rope(x.d, s, f, inverse);
          const std::vector<double> bound = rope_bound(in, s, t);
          CHECK(within(tl, "scaled rope", d.read(x.d), h.read(x.h), bound) == "");
        }
  }
  WARN("scaled rope, worst error / bound:" << tl.str());
}

}  // namespace backend_conformance

// The cases above as Catch2 test cases named "<name>: <check>", tagged `tags`.
#define MXKIT_BACKEND_LOSS_CONFORMANCE_TESTS(Subject, name, tags)                                                                      \
  TEST_CASE(name ": cross-entropy with a loss mask, whole and a chunk of rows at a time", tags "") {                                   \
    backend_conformance::cross_entropy_masked_chunks<Subject>();                                                                       \
  }                                                                                                                                     \
  TEST_CASE(name ": rope with Llama 3.1's frequency scaling", tags "") { backend_conformance::rope_scaled<Subject>(); }
