// SPDX-License-Identifier: Apache-2.0
// mxkit:sm90a (built for sm_90a beside the generic targets, so the backend's GEMMs take the sm90
// tensor-core path on an H100/H200, as the project's other Hopper tests)
// gpu::device_backend (include/mxkit/gpu/nn/backend.hpp), one operation at a time:
//  1. The backend conformance suite (tests/nn/backend_conformance.hpp): every operation on the
//     device and on ref::host_backend, the oracle, from the same values; copies byte for byte,
//     the rest within the bounds stated there; and backend_conformance_loss.hpp's cases: the loss
//     with a loss mask, whole and a chunk of rows at a time, and rope with Llama 3.1's scaling.
//  2. What is the device's own: native operands and f64 data are refused (std::invalid_argument);
//     a bf16 copy that may alias its input is its input (no bytes, the same memory), and the
//     GEMMs that read such copies MN-major give the transposed copies' bits; a bf16 master weight
//     is its own copies; a layer with lean memory gives the default's bits below its peak; bf16
//     RMSNorm weights and the residual form give the same bits.
// Training on the device (twenty steps of every recipe against the host, LoRA healing, the warm
// step's allocations, determinism): catch2_test_device_training.cu.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include <mxkit/gpu/nn/backend.hpp>
#include <mxkit/train/training.hpp>

#include "../catch.hpp"
#include "../nn/backend_conformance.hpp"
#include "../nn/backend_conformance_loss.hpp"
#include "device_backend_downloads.hpp"

using namespace backend_conformance;  // nn_test: mxkit, mxkit::nn, host_backend
using mxkit::gpu::device_backend;

namespace {

// The device backend as a conformance subject: its copies' bytes downloaded (each waits).
struct device_subject {
  using backend_type = device_backend;
  static std::unique_ptr<device_backend> make() { return std::make_unique<device_backend>(); }
  static copy_bytes read_copy(const device_backend& d, const qtensor& q) {
    switch (q.kind()) {
      case precision::mx:
        return q.request().spec.block_scaled().is_nvfp4() ? nvfp4_bytes(gpu_test::download_nvfp4(d, q)) : mx_bytes(gpu_test::download_mx(d, q));
      case precision::fp8: return fp8_bytes(gpu_test::download_fp8(d, q));
      case precision::bf16: return bf16_bytes(gpu_test::download_bf16(d, q), q.length());
      case precision::native: break;
    }
    mxkit::detail::fail("device_subject: a native copy on the device");
  }
};

}  // namespace

// ============================================================== 1. conformance with the oracle

MXKIT_BACKEND_CONFORMANCE_TESTS(device_subject, "device backend", "[gpu][nn][backend]")
MXKIT_BACKEND_LOSS_CONFORMANCE_TESTS(device_subject, "device backend", "[gpu][nn][backend]")

// ============================================================================= 2. the device's own

TEST_CASE("device backend: native operands and f64 data are refused", "[gpu][nn][backend]") {
  device_backend d;
  tensor x = d.alloc(4, 32, dtype::f32, mem_tag::activation), x64 = d.alloc(4, 32, dtype::f64, mem_tag::activation);
  d.write(x, normals(128, 1));
  d.write(x64, normals(128, 1));
  REQUIRE_THROWS_AS(d.quantize(x, plain_request(recipes::native_operand(), block_axis::rowwise)), std::invalid_argument);
  REQUIRE_THROWS_AS(d.quantize(x64, plain_request(recipes::bf16_operand(), block_axis::rowwise)), std::invalid_argument);
  REQUIRE_THROWS_AS(d.quantize(x64, mx_request(recipes::mx_operand(mx_type::mxfp8_e4m3, scale_rule::round_up), block_axis::rowwise, false,
                                               false, 0)),
                    std::invalid_argument);
  const qtensor q = d.quantize(x, plain_request(recipes::bf16_operand(), block_axis::rowwise));
  tensor d64 = d.alloc(4, 4, dtype::f64, mem_tag::activation);
  REQUIRE_THROWS_AS(d.gemm(gemm_product::fprop, q, q, d64), std::invalid_argument);
  tensor w64 = d.alloc(1, 32, dtype::f64, mem_tag::parameter), r64 = d.alloc(4, 1, dtype::f64, mem_tag::activation),
         y64 = d.alloc(4, 32, dtype::f64, mem_tag::activation);
  REQUIRE_THROWS_AS(d.rmsnorm_forward(x64, w64, y64, r64, 1e-5), std::invalid_argument);
  tensor norm = d.scalar(), clip = d.scalar();
  REQUIRE_THROWS_AS(d.amax(x64, norm), std::invalid_argument);
  // global_norm reads f64 tensors (a sharded optimizer's gathered per-rank norms, train/adamw.hpp)
  // as float copies: the norm of the f64 values is the norm of their float roundings.
  tensor norm32 = d.scalar(), clip32 = d.scalar();
  const std::vector<const tensor*> ts = {&x64}, ts32 = {&x};
  d.global_norm(ts, 1.0, norm, clip);
  d.global_norm(ts32, 1.0, norm32, clip32);
  CHECK(d.read(norm) == d.read(norm32));
  CHECK(d.read(clip) == d.read(clip32));
}

TEST_CASE("device backend: a bf16 copy that may alias its input is its input", "[gpu][nn][backend]") {
  // A copy the caller lets alias its input: a bf16 input is handed back as it is (same memory, no
  // bytes added to the copies), anything else is copied as before; the values are the oracle's
  // either way. quantize_both's columnwise bf16 copy is its rowwise copy's bytes, read MN-major.
  host_backend h;
  device_backend d;
  const std::size_t shapes[][2] = {{1, 1}, {3, 37}, {130, 64}};
  std::uint64_t seed = 700;
  for (const auto& sh : shapes)
    for (const dtype t : {dtype::f32, dtype::bf16}) {
      const std::size_t rows = sh[0], cols = sh[1];
      INFO(name_of(t) << " input " << rows << "x" << cols);
      const twin x = make_twin(h, d, rows, cols, t, spread_values(rows, cols, seed++));
      const quant_request r = plain_request(recipes::bf16_operand(), block_axis::rowwise);
      const quant_request col = plain_request(recipes::bf16_operand(), block_axis::columnwise);
      const qpair pd = d.quantize_both(x.d, r, col);
      quant_request ra = r;
      ra.may_alias_input = true;
      const std::size_t held = d.memory().live(mem_tag::quantized_activation);
      const qtensor va = d.quantize(x.d, ra);
      CHECK(copy_mismatch<device_subject>(d, va, h.quantize(x.h, ra)) == "");
      CHECK((d.memory().live(mem_tag::quantized_activation) == held) == (t == dtype::bf16));
      CHECK((device_backend::get(va).data == x.d.data()) == (t == dtype::bf16));
      // The columnwise copy too: x's own rows, read MN-major by the GEMM (same values).
      quant_request ca = col;
      ca.may_alias_input = true;
      const qtensor vc = d.quantize(x.d, ca);
      CHECK(copy_mismatch<device_subject>(d, vc, h.quantize(x.h, ca)) == "");
      CHECK((d.memory().live(mem_tag::quantized_activation) == held) == (t == dtype::bf16));
      CHECK((device_backend::get(vc).data == x.d.data()) == (t == dtype::bf16));
      CHECK(device_backend::get(pd.columnwise).data == device_backend::get(pd.rowwise).data);
      CHECK(pd.columnwise.bytes() == 0);
    }
}

TEST_CASE("device backend: bf16 copies that are their source's rows give the transposed copies' products", "[gpu][nn][backend][gemm]") {
  // Without may_alias_input a bf16 columnwise copy is a real transpose; with it (wgrad's X and
  // dY), or as quantize_both's columnwise copy (the weights' dgrad copy), it is the source's rows
  // read MN-major. Each product from such copies must have the bits of the one from transposed
  // copies: the same values, summed in the same order (sm90 for 16-byte aligned rows, the
  // portable kernel for the odd shape; the vendor path is off: cuBLASLt picks its algorithm per
  // transpose pair, tests/gpu/catch2_test_gemm_vendor.cu checks it within the fp32 bound).
  struct shape {
    std::size_t m, n, k;
  };
  std::uint64_t seed = 3000;
  for (const shape sh : {shape{136, 264, 200}, shape{512, 96, 304}, shape{37, 45, 77}})
    for (const dtype t : {dtype::bf16, dtype::f32}) {
      INFO("M " << sh.m << ", N " << sh.n << ", K " << sh.k << ", " << name_of(t) << " activations");
      device_backend d;
      d.set_vendor_gemm(false);
      tensor x = d.alloc(sh.m, sh.k, t, mem_tag::activation), dy = d.alloc(sh.m, sh.n, t, mem_tag::activation);
      tensor w = d.alloc(sh.n, sh.k, dtype::f32, mem_tag::parameter);
      d.write(x, spread_values(sh.m, sh.k, seed++, 3));
      d.write(dy, spread_values(sh.m, sh.n, seed++, 3));
      d.write(w, spread_values(sh.n, sh.k, seed++, 3));
      const quant_request row = plain_request(recipes::bf16_operand(), block_axis::rowwise);
      const quant_request col = plain_request(recipes::bf16_operand(), block_axis::columnwise);
      quant_request alias = col;
      alias.may_alias_input = true;
      const qtensor x_t = d.quantize(x, col), dy_t = d.quantize(dy, col), w_t = d.quantize(w, col);  // transposes
      const std::size_t held = d.memory().live(mem_tag::quantized_activation);
      const qtensor x_a = d.quantize(x, alias), dy_a = d.quantize(dy, alias);
      CHECK((d.memory().live(mem_tag::quantized_activation) == held) == (t == dtype::bf16));  // bf16: no copy made
      const qpair wq = d.quantize_both(w, row, col);
      const qtensor dy_row = d.quantize(dy, row);
      auto product = [&](gemm_product p, const qtensor& a, const qtensor& b, std::size_t rows, std::size_t cols) {
        tensor out = d.alloc(rows, cols, dtype::f32, mem_tag::gradient);
        d.fill(out, nan_value);
        d.gemm(p, a, b, out, 1.0f, 0.0f, nullptr);
        return d.read(out);
      };
      const std::vector<double> wgrad = product(gemm_product::wgrad, dy_t, x_t, sh.n, sh.k);
      const std::vector<double> dgrad = product(gemm_product::dgrad, dy_row, w_t, sh.m, sh.k);
      CHECK(std::none_of(wgrad.begin(), wgrad.end(), [](double v) { return std::isnan(v); }));
      auto same = [](const std::vector<double>& a, const std::vector<double>& b) {
        return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](double p, double q) { return mxkit::bit_cast<std::uint64_t>(p) == mxkit::bit_cast<std::uint64_t>(q); });
      };
      CHECK(same(product(gemm_product::wgrad, dy_a, x_a, sh.n, sh.k), wgrad));  // both MN-major
      CHECK(same(product(gemm_product::wgrad, dy_a, x_t, sh.n, sh.k), wgrad));  // A only
      CHECK(same(product(gemm_product::wgrad, dy_t, x_a, sh.n, sh.k), wgrad));  // B only
      CHECK(same(product(gemm_product::dgrad, dy_row, wq.columnwise, sh.m, sh.k), dgrad));
    }
}

TEST_CASE("device backend: a bf16 master weight is its own bf16 copies, with the copies' products", "[gpu][nn][backend][gemm]") {
  // nn::linear asks for its weight copies with may_alias_input (they are read only while the
  // weight's version is theirs): a bf16 master is then its fprop copy and, read MN-major, its
  // dgrad copy, and no quantized weight bytes exist. An fp32 master holding the same values is
  // cast into copies of its own. Every product must have the same bits either way (dW rounded
  // from the fp32 gradient to bf16 once, as the bf16 epilogue rounds its fp32 sum). mxkit's own
  // kernels (vendor path off): cuBLASLt may sum a bf16 D otherwise than an fp32 one.
  struct shape {
    std::size_t m, n, k;
  };
  std::uint64_t seed = 3500;
  for (const shape sh : {shape{128, 320, 192}, shape{96, 40, 72}}) {
    INFO("M " << sh.m << ", N " << sh.n << ", K " << sh.k);
    device_backend d;
    d.set_vendor_gemm(false);
    const recipe r = with_bf16(recipes::bf16());
    linear w16(d, "w16", sh.k, sh.n, 0, r, dtype::bf16), w32(d, "w32", sh.k, sh.n, 0, r, dtype::f32);
    const std::vector<double> wv = bf16_normals(sh.n * sh.k, seed++, 0.05);
    d.write(w16.weight().value, wv);
    d.write(w32.weight().value, wv);
    tensor x = d.alloc(sh.m, sh.k, dtype::bf16, mem_tag::activation), dy = d.alloc(sh.m, sh.n, dtype::bf16, mem_tag::activation);
    d.write(x, bf16_normals(x.size(), seed++));
    d.write(dy, bf16_normals(dy.size(), seed++));
    tensor y16 = d.alloc(sh.m, sh.n, dtype::bf16, mem_tag::activation), y32 = d.alloc(sh.m, sh.n, dtype::bf16, mem_tag::activation);
    mark_grads_zero({&w16.weight(), &w32.weight()});
    w16.forward(x, y16, true);
    CHECK(d.memory().live(mem_tag::quantized_weight) == 0);
    CHECK(device_backend::get(w16.cached_rowwise()).data == w16.weight().value.data());
    CHECK(device_backend::get(w16.cached_columnwise()).data == w16.weight().value.data());
    w32.forward(x, y32, true);
    CHECK(d.memory().live(mem_tag::quantized_weight) == 2 * sh.n * sh.k);  // w32's fprop copy; its dgrad copy shares the bytes
    tensor dx16, dx32 = d.alloc(sh.m, sh.k, dtype::bf16, mem_tag::activation);
    w16.backward(dy, &dx16);  // dX allocated by backward
    w32.backward(dy, &dx32);
    REQUIRE(dx16.defined());
    CHECK(same_values("y", d.read(y16), d.read(y32)) == "");
    CHECK(same_values("dx", d.read(dx16), d.read(dx32)) == "");
    std::vector<double> g32 = d.read(w32.weight().grad);
    for (double& v : g32) v = mxkit::bfloat16::from_float(static_cast<float>(v)).to_float();
    CHECK(same_values("dW", d.read(w16.weight().grad), g32) == "");
  }
}

TEST_CASE("device backend: a layer with lean memory gives the same bits below the default's peak", "[gpu][nn][backend]") {
  // linear_memory::lean() (weight copies per GEMM, dY's copies one at a time) makes the requests
  // the cached path makes, so every output and gradient must keep its bits; the 8-bit recipes'
  // backward peaks lower, and no weight copy outlives its GEMM. Two steps: the second runs on
  // moved scales and a new weight version.
  layer_config c;
  c.d_model = 128;
  c.n_heads = 2;
  c.n_kv_heads = 1;
  c.d_ff = 512;
  const batch_shape shape{2, 64};
  const std::size_t M = shape.tokens();
  for (const recipe& r : {with_bf16(recipes::fp8_delayed()), with_bf16(recipes::mxfp8()), with_bf16(recipes::mxfp4_amd())})
  for (const dtype weights : {dtype::f32, dtype::bf16}) {
    INFO(r.name << ", " << name_of(weights) << " weights");
    std::vector<std::vector<double>> outputs[2];
    std::size_t peak[2] = {}, weight_copies[2] = {};
    for (int lean = 0; lean < 2; ++lean) {
      device_backend d;
      transformer_layer layer(d, "layer", c, 0, r, weights);
      layer.init(1, 0.02, 2);
      if (lean) layer.set_memory(linear_memory::lean());
      tensor x = d.alloc(M, c.d_model, dtype::bf16, mem_tag::activation), dy = d.alloc(M, c.d_model, dtype::bf16, mem_tag::activation);
      d.write(x, bf16_normals(x.size(), 41));
      d.write(dy, bf16_normals(dy.size(), 42, 1e-2));
      tensor y = d.alloc(M, c.d_model, dtype::bf16, mem_tag::activation), dx = d.alloc(M, c.d_model, dtype::bf16, mem_tag::activation);
      std::vector<parameter*> params;
      layer.collect(params);
      for (int step = 0; step < 2; ++step) {
        mark_grads_zero(params);
        layer.forward(x, y, shape, true);
        d.memory().reset_peak();
        layer.backward(dy, &dx, shape);
        peak[lean] = d.memory().peak_total();
        weight_copies[lean] = d.memory().live(mem_tag::quantized_weight);
        outputs[lean].push_back(d.read(y));
        outputs[lean].push_back(d.read(dx));
        for (parameter* p : params) outputs[lean].push_back(d.read(p->grad));
        for (parameter* p : params) {
          d.axpy(-0.5, p->grad, p->value);
          ++p->version;
        }
        layer.end_step();
      }
    }
    REQUIRE(outputs[0].size() == outputs[1].size());
    for (std::size_t i = 0; i < outputs[0].size(); ++i) CHECK(same_values("output " + std::to_string(i), outputs[1][i], outputs[0][i]) == "");
    CHECK(weight_copies[0] > 0);
    CHECK(weight_copies[1] == 0);
    CHECK(peak[1] < peak[0]);
    WARN(r.name << ", " << name_of(weights) << " weights: backward peak " << peak[0] << " bytes, lean " << peak[1]);
  }
}

TEST_CASE("device backend: RMSNorm with bf16 weights, and the residual form, give the same bits", "[gpu][nn][backend]") {
  // A bf16 weight is widened to float as an f32 one is, and a bf16 dw is the f32 sum rounded
  // once: bf16 weights holding the f32 weights' values give the same y and dx, and dw rounded.
  // The residual form (dx = dr + ..., dx not read) gives the accumulating form's bits.
  std::uint64_t seed = 2500;
  for (const std::size_t C : {std::size_t{96}, std::size_t{768}, std::size_t{2050}}) {  // row-per-warp, and the group kernel
    const std::size_t R = 70;
    INFO("rmsnorm " << R << "x" << C);
    device_backend d;
    auto bf16_values = [&](std::size_t n, double mean, double sd) {
      std::vector<double> v = normals(n, seed++, mean, sd);
      for (double& e : v) e = mxkit::bfloat16::from_float(static_cast<float>(e)).to_float();
      return v;
    };
    const std::vector<double> wv = bf16_values(C, 1.0, 0.5), dw0 = bf16_values(C, 0.0, 0.1), dx0 = bf16_values(R * C, 0.0, 0.1);
    tensor x = d.alloc(R, C, dtype::bf16, mem_tag::activation), dy = d.alloc(R, C, dtype::bf16, mem_tag::activation);
    d.write(x, normals(R * C, seed++));
    d.write(dy, normals(R * C, seed++));
    tensor w32 = d.alloc(1, C, dtype::f32, mem_tag::parameter), w16 = d.alloc(1, C, dtype::bf16, mem_tag::parameter);
    tensor g32 = d.alloc(1, C, dtype::f32, mem_tag::gradient), g16 = d.alloc(1, C, dtype::bf16, mem_tag::gradient);
    for (tensor* t : {&w32, &w16}) d.write(*t, wv);
    for (tensor* t : {&g32, &g16}) d.write(*t, dw0);
    tensor y32 = d.alloc(R, C, dtype::bf16, mem_tag::activation), y16 = d.alloc(R, C, dtype::bf16, mem_tag::activation);
    tensor rs = d.alloc(R, 1, dtype::f32, mem_tag::activation), rs16 = d.alloc(R, 1, dtype::f32, mem_tag::activation);
    d.rmsnorm_forward(x, w32, y32, rs, 1e-5);
    d.rmsnorm_forward(x, w16, y16, rs16, 1e-5);
    CHECK(same_values("y", d.read(y16), d.read(y32)) == "");
    CHECK(same_values("rstd", d.read(rs16), d.read(rs)) == "");
    tensor dx = d.alloc(R, C, dtype::bf16, mem_tag::activation), dr = d.alloc(R, C, dtype::bf16, mem_tag::activation);
    tensor dx16 = d.alloc(R, C, dtype::bf16, mem_tag::activation);
    d.write(dx, dx0);
    d.write(dr, dx0);
    d.fill(dx16, nan_value);  // the residual form must not read it
    d.rmsnorm_backward(dy, x, w32, rs, dx, &g32);  // dx += ...
    d.rmsnorm_backward(dy, x, w16, rs, dx16, &g16, &dr);  // dx16 = dr + ...
    CHECK(same_values("dx", d.read(dx16), d.read(dx)) == "");
    CHECK(same_values("dr untouched", d.read(dr), dx0) == "");
    std::vector<double> want = d.read(g32);
    for (double& e : want) e = mxkit::bfloat16::from_float(static_cast<float>(e)).to_float();
    CHECK(same_values("dw", d.read(g16), want) == "");
  }
}
