// SPDX-License-Identifier: Apache-2.0
// Validating another kernel's output against mxkit's reference (docs/validation.md). Three checks of foreign-looking output with planted errors:
//  1. NVIDIA TE-style MXFP8 columnwise copy: data [M, K] not transposed, scales in cuBLAS's
//     128x4 tiles; one scale byte and one element byte are wrong.
//  2. ROCm TE-style MXFP4 copy: Hadamard-rotated, AITER-shuffled scales; one nibble is wrong.
//     The report shows the rotated value that was quantized, not the input.
//  3. A GEMM output (fprop of the MXFP8 copies, summed by a "kernel" in another order) with one
//     wrong element, checked on 8 sampled rows against the accumulation bound.
// The peer presets (validation/peer_presets.hpp) stand in for the peers' kernels here: quantize_like
// writes the bytes and the storage a peer writes. Exits 1 unless each report finds exactly the
// planted errors.
#include <mxkit/mxkit.hpp>

#include <cmath>
#include <cstdio>
#include <iostream>
#include <string_view>
#include <vector>

#include "example_arguments.hpp"

namespace {
// The usage (example_arguments.hpp: --help, and any other argument refused).
constexpr const char* usage =
    "usage: 04_validate_foreign [--help]\n"
    "Validates three foreign-looking outputs with planted errors against mxkit's reference (a TE-style\n"
    "MXFP8 copy, a ROCm-TE-style rotated MXFP4 copy, a GEMM output) and prints the reports; exits 1\n"
    "unless each report finds exactly the planted errors.\n";
}  // namespace

int main(int argc, char** argv) {
  if (const int stop = example::no_arguments(argc, argv, "04_validate_foreign", usage); stop >= 0) return stop;
  using mxkit::block_axis;
  const std::size_t M = 256, K = 512, N = 128;
  std::vector<float> x(M * K), w(N * K);
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = std::sin(0.37f * static_cast<float>(i)) * std::exp(std::cos(0.011f * static_cast<float>(i)));
  for (std::size_t i = 0; i < w.size(); ++i) w[i] = std::cos(0.23f * static_cast<float>(i)) * 0.5f;
  const mxkit::matrix_view<const float> xin{x.data(), M, K}, win{w.data(), N, K};
  bool found = true;

  // 1. TE-style MXFP8 columnwise copy with cuBLAS scales.
  const mxkit::ref::peer_preset te = mxkit::ref::peers::te_mxfp8(mxkit::mx_type::mxfp8_e4m3, mxkit::scale_layout::cublas_128x4);
  mxkit::mx_foreign_buffers col = mxkit::ref::quantize_like(te, xin, block_axis::columnwise);
  const mxkit::mx_foreign_view cv = col.view();
  col.scales[cv.scale_offset_of(300, 5)] += 1;  // column 300, rows 160..191: scale one binade too large
  col.data[77 * K + 12] ^= 0x01;                // row 77, column 12: the code's last mantissa bit
  const mxkit::ref::mx_validation_report r1 = mxkit::ref::validate(xin, col.view(), te.validation());
  std::cout << "== " << te.name << ", columnwise\n" << r1 << "\n" << r1.summary() << "\n\n";
  found = found && r1.scale_mismatches == 1 && r1.element_mismatches == 1 && r1.padding_mismatches == 0;

  // 2. ROCm TE-style MXFP4 with the Hadamard rotation and AITER-shuffled scales.
  const mxkit::ref::peer_preset rocm = mxkit::ref::peers::rocm_te_mxfp4(mxkit::ref::rocm_fp4_path::hardware, mxkit::scale_layout::aiter_shuffle);
  mxkit::mx_foreign_buffers fp4 = mxkit::ref::quantize_like(rocm, xin, block_axis::rowwise);
  fp4.data[3 * (K / 2) + 18] ^= 0x40;  // row 3, column 37: the high nibble of byte 18 (low nibble first)
  const mxkit::ref::mx_validation_report r2 = mxkit::ref::validate(xin, fp4.view(), rocm.validation());
  std::cout << "== " << rocm.name << ", rowwise\n" << r2 << "\n\n";
  found = found && r2.mismatch_count() == 1 && r2.mismatches[0].row == 3 && r2.mismatches[0].col == 37;

  // 3. fprop Y[M,N] = X[M,K] . W[N,K]^T on the rowwise MXFP8 copies, from a kernel that sums in
  //    double and rounds once (another order than the reference), with one wrong element.
  const mxkit::mx_tensor xq = mxkit::ref::quantize_rowwise(xin, mxkit::mx_type::mxfp8_e4m3);
  const mxkit::mx_tensor wq = mxkit::ref::quantize_rowwise(win, mxkit::mx_type::mxfp8_e4m3);
  const std::vector<float> xd = mxkit::ref::dequantize(xq), wd = mxkit::ref::dequantize(wq);
  std::vector<float> y(M * N);
  for (std::size_t i = 0; i < M; ++i)
    for (std::size_t j = 0; j < N; ++j) {
      double s = 0;
      for (std::size_t k = 0; k < K; ++k) s += static_cast<double>(xd[i * K + k]) * wd[j * K + k];
      y[i * N + j] = static_cast<float>(s);
    }
  mxkit::ref::gemm_validate_options o;
  o.sample_rows = 8;
  o.max_reported = 3;
  const std::vector<std::size_t> rows = mxkit::detail::gemm_rows_to_check(M, o);
  y[rows[2] * N + 99] += 0.5f;  // a sampled row
  const mxkit::ref::gemm_validation_report r3 = mxkit::ref::validate_gemm(xq.view(), wq.view(), mxkit::matrix_view<const float>{y.data(), M, N}, o);
  std::cout << "== fprop " << M << "x" << N << "x" << K << ", 8 sampled rows\n" << r3 << "\n";
  found = found && r3.over_bound == 1 && r3.worst[0].row == rows[2] && r3.worst[0].col == 99;

  std::printf("\n%s\n", found ? "every planted error was found, nothing else" : "UNEXPECTED: the reports differ from the planted errors");
  return found ? 0 : 1;
}
