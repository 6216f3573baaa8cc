// SPDX-License-Identifier: Apache-2.0
// The backend interface (nn/backend.hpp): every newer operation against a simple independent
// computation (multi-tensor norm and AdamW, cross-entropy's in-place gradient, the GEMM's
// residual epilogue, int32 tokens, the fused RMSNorm/SwiGLU producers), the checks-once
// contract (each public call reaches the backend once, with consistent arguments; a bad call
// never reaches it), and a training step that reads nothing back but at its logging steps and
// allocates nothing new once warm.
#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <variant>
#include <vector>

#include <mxkit/train/training.hpp>
#include <mxkit/host/host_backend.hpp>
#include <mxkit/ref/nn/adamw.hpp>
#include <mxkit/ref/nn/cross_entropy.hpp>

#include "../catch.hpp"
#include "nn_test_helpers.hpp"

using namespace nn_test;

namespace {

// The bytes of two quantized copies are the same (codes, scales, FP8 scale).
bool same_bytes(const qtensor& a, const qtensor& b) {
  const auto& pa = host_backend::get(a).data;
  const auto& pb = host_backend::get(b).data;
  if (pa.index() != pb.index() || a.rows() != b.rows() || a.cols() != b.cols() || a.axis() != b.axis()) return false;
  return std::visit(
      [&](const auto& x) {
        using D = std::decay_t<decltype(x)>;
        const D& y = std::get<D>(pb);
        if constexpr (std::is_same_v<D, mx_tensor>) return std::ranges::equal(x.data(), y.data()) && std::ranges::equal(x.scales(), y.scales());
        else if constexpr (std::is_same_v<D, nvfp4_tensor>)
          return std::ranges::equal(x.data(), y.data()) && std::ranges::equal(x.scales(), y.scales()) &&
                 mxkit::bit_cast<std::uint32_t>(x.tensor_scale()) == mxkit::bit_cast<std::uint32_t>(y.tensor_scale());
        else if constexpr (std::is_same_v<D, fp8_tensor>) return x.data == y.data && x.scale == y.scale && x.type == y.type;
        else if constexpr (std::is_same_v<D, std::vector<bfloat16>>) {
          for (std::size_t i = 0; i < x.size(); ++i)
            if (x[i].bits() != y[i].bits()) return false;
          return x.size() == y.size();
        } else return x == y;
      },
      pa);
}

train_config short_run(std::size_t steps) {
  train_config c;
  c.steps = steps;
  c.shape = {2, 32};
  c.schedule = {1e-2, 1e-3, 2, steps};
  return c;
}

}  // namespace

TEST_CASE("backend: the multi-tensor norm and clip factor equal a direct computation", "[nn][backend]") {
  for (const dtype t : {dtype::f32, dtype::f64}) {
    INFO(name_of(t));
    host_backend be;
    std::vector<tensor> ts = {random_tensor(be, 3, 7, 1, 0.5, t), random_tensor(be, 1, 5, 2, 2.0, t), random_tensor(be, 16, 4, 3, 0.1, t)};
    const std::vector<const tensor*> ptrs = {&ts[0], &ts[1], &ts[2]};
    double ss = 0.0;
    for (const tensor& x : ts)
      for (double v : be.read(x)) ss += v * v;
    const double want = std::sqrt(ss);
    tensor norm = be.scalar(), clip = be.scalar();
    be.global_norm(ptrs, 0.0, norm, clip);  // no clipping
    CHECK(be.read_scalar(norm) == Approx(want).epsilon(1e-14));
    CHECK(be.read_scalar(clip) == 1.0);
    be.global_norm(ptrs, 2.0 * want, norm, clip);  // under the limit
    CHECK(be.read_scalar(clip) == 1.0);
    be.global_norm(ptrs, 0.25 * want, norm, clip);  // over: scaled to the limit
    CHECK(be.read_scalar(clip) == Approx(0.25).epsilon(1e-14));
    be.write(ts[1], {1.0, std::nan(""), 0.0, 0.0, 0.0});
    be.global_norm(ptrs, 1.0, norm, clip);
    CHECK(std::isnan(be.read_scalar(norm)));
    CHECK(be.read_scalar(clip) == 1.0);
    CHECK(be.counters().op_calls(backend_op::global_norm) == 4);  // one operation per call, every tensor
  }
}

TEST_CASE("backend: the multi-tensor AdamW step equals per-tensor updates, and skips on the device", "[nn][backend]") {
  host_backend be;
  struct slot {
    tensor p, g, m, v;
    double wd;
  };
  std::vector<slot> slots;
  for (std::uint64_t i = 0; i < 3; ++i) {
    const std::size_t rows = 2 + i, cols = 5;
    slots.push_back({random_tensor(be, rows, cols, 10 + i), random_tensor(be, rows, cols, 20 + i, 0.3), be.alloc(rows, cols, dtype::f32, mem_tag::optimizer),
                     be.alloc(rows, cols, dtype::f32, mem_tag::optimizer), i == 1 ? 0.0 : 0.1});
  }
  // The reference: plain per-tensor kernels on copies, host data, with the norm computed here.
  struct host_slot {
    std::vector<float> p, g, m, v;
  };
  std::vector<host_slot> want;
  for (const slot& s : slots) want.push_back({floats(be, s.p), floats(be, s.g), floats(be, s.m), floats(be, s.v)});
  std::vector<adamw_slot_ref> refs;
  std::vector<const tensor*> grads;
  for (slot& s : slots) {
    refs.push_back({&s.p, &s.g, &s.m, &s.v, s.wd});
    grads.push_back(&s.g);
  }
  tensor norm = be.scalar(), clip = be.scalar(), state = be.alloc(1, 2, dtype::f64, mem_tag::optimizer);
  const adamw_args args{2e-2, 0.9, 0.95, 1e-8};
  for (std::uint64_t step = 1; step <= 3; ++step) {
    double ss = 0.0;
    for (const host_slot& h : want) ss += ref::sum_squares(h.g.data(), h.g.size());
    const double n = std::sqrt(ss), c = n > 0.5 ? 0.5 / n : 1.0;
    for (std::size_t i = 0; i < want.size(); ++i)
      ref::adamw_update(want[i].p.data(), want[i].g.data(), want[i].m.data(), want[i].v.data(), want[i].p.size(),
                        adamw_hyper{args.lr, args.beta1, args.beta2, args.eps, slots[i].wd, c, step});
    be.global_norm(grads, 0.5, norm, clip);
    be.adamw_step(refs, args, norm, clip, state);
  }
  for (std::size_t i = 0; i < slots.size(); ++i) {
    INFO("slot " << i);
    CHECK(floats(be, slots[i].p) == want[i].p);  // bit for bit
    CHECK(floats(be, slots[i].m) == want[i].m);
    CHECK(floats(be, slots[i].v) == want[i].v);
  }
  CHECK(be.read(state) == std::vector<double>{3.0, 0.0});
  // A first moment by hand: m after one step is (1 - b1) * g * clip (fresh state).
  {
    host_backend b2;
    tensor p = b2.alloc(1, 1, dtype::f32, mem_tag::parameter), g = b2.alloc(1, 1, dtype::f32, mem_tag::gradient);
    tensor m = b2.alloc(1, 1, dtype::f32, mem_tag::optimizer), v = b2.alloc(1, 1, dtype::f32, mem_tag::optimizer);
    b2.write(g, {4.0});
    tensor n2 = b2.scalar(), c2 = b2.scalar(), s2 = b2.alloc(1, 2, dtype::f64, mem_tag::optimizer);
    const std::vector<const tensor*> gs = {&g};
    const std::vector<adamw_slot_ref> r2 = {{&p, &g, &m, &v, 0.0}};
    b2.global_norm(gs, 1.0, n2, c2);
    b2.adamw_step(r2, args, n2, c2, s2);
    CHECK(b2.read(m)[0] == Approx(0.1 * 4.0 * 0.25));
    CHECK(b2.read(p)[0] == Approx(-args.lr).epsilon(1e-6));  // first step: lr * sign
  }
  // A non-finite norm: nothing is written, the skip is counted on the device.
  be.write(slots[2].g, std::vector<double>(slots[2].g.size(), std::numeric_limits<double>::infinity()));
  const std::vector<float> before = floats(be, slots[0].p), m_before = floats(be, slots[0].m);
  be.global_norm(grads, 0.5, norm, clip);
  be.adamw_step(refs, args, norm, clip, state);
  CHECK(floats(be, slots[0].p) == before);
  CHECK(floats(be, slots[0].m) == m_before);
  CHECK(be.read(state) == std::vector<double>{3.0, 1.0});
}

TEST_CASE("backend: cross-entropy writes the logits' gradient in place", "[nn][backend]") {
  for (const dtype t : {dtype::f32, dtype::bf16, dtype::f64}) {
    INFO(name_of(t));
    host_backend be;
    const std::size_t M = 6, V = 10;
    tensor logits = random_tensor(be, M, V, 4, 2.0, t), targets = be.alloc(M, 1, dtype::i32, mem_tag::activation), loss = be.scalar();
    const std::vector<std::int32_t> tg = {0, 9, 3, 3, 7, 1};
    be.write_tokens(targets, tg, V);
    const std::vector<double> z = be.read(logits);
    // Independent: loss = mean(logsumexp - z_t), grad = (softmax - onehot) / M.
    double want_loss = 0.0;
    std::vector<double> want_grad(M * V);
    for (std::size_t r = 0; r < M; ++r) {
      double mx = -INFINITY, sum = 0.0;
      for (std::size_t j = 0; j < V; ++j) mx = std::max(mx, z[r * V + j]);
      for (std::size_t j = 0; j < V; ++j) sum += std::exp(z[r * V + j] - mx);
      want_loss += std::log(sum) + mx - z[r * V + static_cast<std::size_t>(tg[r])];
      for (std::size_t j = 0; j < V; ++j)
        want_grad[r * V + j] = (std::exp(z[r * V + j] - mx) / sum - (j == static_cast<std::size_t>(tg[r]) ? 1.0 : 0.0)) / M;
    }
    want_loss /= M;
    be.cross_entropy(logits, targets, loss, false);
    CHECK(be.read_scalar(loss) == Approx(want_loss).epsilon(1e-14));
    CHECK(be.read(logits) == z);  // untouched without a gradient
    be.cross_entropy(logits, targets, loss, true);
    CHECK(be.read_scalar(loss) == Approx(want_loss).epsilon(1e-14));
    const std::vector<double> g = be.read(logits);
    const double tol = t == dtype::bf16 ? 1.0 / 256 : t == dtype::f32 ? 1e-7 : 1e-15;  // the storage's relative precision
    for (std::size_t i = 0; i < g.size(); ++i) CHECK(std::fabs(g[i] - want_grad[i]) <= tol * std::fabs(want_grad[i]) + 1e-300);
    if (t == dtype::f32) {  // the same bytes as the out-of-place kernel
      std::vector<float> zf(z.begin(), z.end()), out(M * V);
      ref::cross_entropy(zf.data(), tg.data(), out.data(), M, V);
      CHECK(floats(be, logits) == out);
    }
  }
}

TEST_CASE("backend: the residual add in the GEMM epilogue equals a GEMM then an add", "[nn][backend]") {
  constexpr std::size_t M = 32, K = 64, N = 48;
  for (const recipe& r : {recipes::mxfp4_amd(), recipes::bf16(), recipes::mxfp8()}) {
    INFO(r.name);
    host_backend be;
    tensor x = random_tensor(be, M, K, 1), w = random_tensor(be, N, K, 2, 0.1), c = random_tensor(be, M, N, 3);
    quant_request ra, rb;
    ra.spec = r.fprop.a;
    ra.block.hadamard = r.fprop.hadamard;
    rb = ra;
    rb.spec = r.fprop.b;
    const qtensor a = be.quantize(x, ra), b = be.quantize(w, rb);
    const std::vector<double> c0 = be.read(c);
    tensor fused = be.alloc(M, N, dtype::f32, mem_tag::activation), o = be.alloc(M, N, dtype::f32, mem_tag::activation);
    be.gemm(gemm_product::fprop, a, b, fused, 1.0f, 1.0f, &c);
    be.gemm(gemm_product::fprop, a, b, o);
    tensor unfused = be.alloc(M, N, dtype::f32, mem_tag::activation);
    be.copy(c, unfused);
    be.axpy(1.0, o, unfused);
    CHECK(floats(be, fused) == floats(be, unfused));  // bit for bit: the layer's old two passes
    CHECK(be.read(c) == c0);                          // C is only read
    // bf16 D: the epilogue rounds acc + C once.
    tensor cb = be.alloc(M, N, dtype::bf16, mem_tag::activation), db = be.alloc(M, N, dtype::bf16, mem_tag::activation);
    be.write(cb, c0);
    be.gemm(gemm_product::fprop, a, b, db, 1.0f, 1.0f, &cb);
    const std::vector<double> got = be.read(db), cbv = be.read(cb), ov = be.read(o);
    std::size_t bad = 0;
    for (std::size_t i = 0; i < got.size(); ++i)
      bad += got[i] != bfloat16::from_float(static_cast<float>(ov[i]) + static_cast<float>(cbv[i]), rounding::nearest_even,
                                            overflow::propagate).to_float();
    CHECK(bad == 0);
    // C may be D itself (the old beta = 1 accumulation).
    be.gemm(gemm_product::fprop, a, b, unfused, 1.0f, 1.0f, &unfused);
    tensor twice = be.alloc(M, N, dtype::f32, mem_tag::activation);
    be.copy(fused, twice);
    be.axpy(1.0, o, twice);
    CHECK(floats(be, unfused) == floats(be, twice));
    tensor wrong = be.alloc(M, N + 1, dtype::f32, mem_tag::activation);
    CHECK_THROWS_WITH(be.gemm(gemm_product::fprop, a, b, fused, 1.0f, 1.0f, &wrong), mxkit_test::contains("gemm C"));
  }
}

TEST_CASE("backend: tokens are int32 tensors, range-checked on upload", "[nn][backend]") {
  host_backend be;
  const std::vector<std::int32_t> ids = {3, 0, 3, 4};
  tensor tokens = be.alloc(4, 1, dtype::i32, mem_tag::activation);
  be.write_tokens(tokens, ids, 5);
  CHECK(be.read(tokens) == std::vector<double>{3, 0, 3, 4});
  CHECK(tokens.bytes() == 16);
  tensor table = random_tensor(be, 5, 3, 7), out = be.alloc(4, 3, dtype::f32, mem_tag::activation);
  be.embedding_forward(tokens, table, out);
  const std::vector<double> t = be.read(table), o = be.read(out);
  for (std::size_t i = 0; i < 4; ++i)
    for (std::size_t j = 0; j < 3; ++j) CHECK(o[i * 3 + j] == t[static_cast<std::size_t>(ids[i]) * 3 + j]);
  tensor dtable = be.alloc(5, 3, dtype::f32, mem_tag::gradient), dout = random_tensor(be, 4, 3, 8);
  be.embedding_backward(tokens, dout, dtable);
  const std::vector<double> d = be.read(dout), dt = be.read(dtable);
  for (std::size_t j = 0; j < 3; ++j) {
    CHECK(dt[3 * 3 + j] == static_cast<double>(static_cast<float>(d[0 * 3 + j]) + static_cast<float>(d[2 * 3 + j])));  // token 3 twice
    CHECK(dt[1 * 3 + j] == 0.0);
  }
  CHECK_THROWS_WITH(be.write_tokens(tokens, {0, 1, 5, 2}, 5), mxkit_test::contains("token 2 is 5, outside the vocabulary [0, 5)"));
  CHECK_THROWS_WITH(be.write_tokens(tokens, {0, 1}, 5), mxkit_test::contains("expected 2x1"));
  tensor as_float = be.alloc(4, 1, dtype::f32, mem_tag::activation);
  CHECK_THROWS_WITH(be.write_tokens(as_float, ids, 5), mxkit_test::contains("element type is f32, expected i32"));
  CHECK_THROWS_WITH(be.embedding_forward(as_float, table, out), mxkit_test::contains("expected i32"));
  CHECK(be.read(tokens) == std::vector<double>{3, 0, 3, 4});  // a refused upload wrote nothing
}

TEST_CASE("backend: fused RMSNorm and SwiGLU producers write the bytes of a separate quantize", "[nn][backend]") {
  constexpr std::size_t M = 64, C = 64, F = 96;
  std::vector<recipe> rs = {recipes::mxfp4_amd(), recipes::mxfp4_nvidia_style(), recipes::mxfp8(), recipes::fp8_delayed({4, amax_algorithm::max, 0}),
                            recipes::bf16(), recipes::native()};
  for (const dtype act : {dtype::f32, dtype::bf16}) {
    for (const recipe& r : rs) {
      INFO(r.name << ", " << name_of(act) << " activations");
      host_backend be;
      // Two identical tables: the fused path writes amaxes into one, the separate path into the other.
      const std::vector<fp8_type> types = {fp8_type::e4m3};
      const std::shared_ptr<scaling_table> t1 = be.make_scaling_table(r.scaling, types), t2 = be.make_scaling_table(r.scaling, types);
      auto plan_for = [&](scaling_table* t, std::uint32_t stream) {
        quant_plan p;
        for (quant_request* q : {&p.rowwise, &p.columnwise}) {
          const bool col = q == &p.columnwise;
          const gemm_spec& g = col ? r.wgrad : r.fprop;
          const operand_spec& o = col ? g.b : g.a;
          q->spec = o;
          q->axis = col ? block_axis::columnwise : block_axis::rowwise;
          q->use = col ? operand_use::wgrad_x : operand_use::fprop_x;
          q->block.hadamard = g.hadamard;
          q->block.random_signs = g.random_signs;
          q->block.seed = g.seed;
          q->block.stream = stream;
          q->fp8 = {t, 0, true};
        }
        p.columnwise_wanted = true;
        return p;
      };
      tensor x = random_tensor(be, M, C, 1, 1.0, act), w = random_tensor(be, 1, C, 2, 0.5);
      tensor rstd1 = be.alloc(M, 1, dtype::f32, mem_tag::activation), rstd2 = be.alloc(M, 1, dtype::f32, mem_tag::activation);
      tensor y = be.alloc(M, C, act, mem_tag::activation), y_fused = be.alloc(M, C, act, mem_tag::activation);
      be.rmsnorm_forward(x, w, y, rstd1, 1e-5);
      const quant_plan p1 = plan_for(t1.get(), 9), p2 = plan_for(t2.get(), 9);
      const qpair sep = be.quantize_both(y, p2.rowwise, p2.columnwise);
      const qpair fused = be.rmsnorm_quantize(x, w, rstd2, 1e-5, p1, nullptr);
      CHECK(same_bytes(fused.rowwise, sep.rowwise));
      CHECK(same_bytes(fused.columnwise, sep.columnwise));
      CHECK(be.read(rstd2) == be.read(rstd1));
      CHECK(be.read(t1->history()) == be.read(t2->history()));  // the same amax recorded
      quant_plan row_only = p1;
      row_only.columnwise_wanted = false;
      const qpair fused_y = be.rmsnorm_quantize(x, w, rstd2, 1e-5, row_only, &y_fused);
      CHECK(same_bytes(fused_y.rowwise, sep.rowwise));
      CHECK_FALSE(fused_y.columnwise.defined());
      CHECK(be.read(y_fused) == be.read(y));

      tensor gu = random_tensor(be, M, 2 * F, 3, 1.0, act), s = be.alloc(M, F, act, mem_tag::activation);
      be.swiglu_forward(gu, s);
      const qpair sep2 = be.quantize_both(s, p2.rowwise, p2.columnwise);
      const qpair fused2 = be.swiglu_quantize(gu, p1, nullptr);
      CHECK(same_bytes(fused2.rowwise, sep2.rowwise));
      CHECK(same_bytes(fused2.columnwise, sep2.columnwise));
      CHECK(be.read(t1->history()) == be.read(t2->history()));
    }
  }
}

namespace {

// A host backend that counts what reaches each protected virtual and checks that the arguments
// are consistent there (the public functions must have refused anything else). What an unfused
// producer (nn::backend's default) calls on its way (scratch, the kernel, the quantization) is
// checked but not counted: each public call reaches its own do_*() once.
class checking_backend : public host_backend {
 public:
  std::array<std::uint64_t, backend_op_count> reached{};
  std::uint64_t violations = 0;
  mutable std::uint64_t reads = 0;

  std::uint64_t at(backend_op o) const { return reached[static_cast<std::size_t>(o)]; }

 protected:
  void hit(backend_op o, bool consistent) {
    if (!inside_producer_) ++reached[static_cast<std::size_t>(o)];
    if (!consistent) ++violations;
  }
  // Runs a producer's default with the calls it makes uncounted.
  template <class F>
  qpair producer(F&& run) {
    ++inside_producer_;
    qpair q = run();
    --inside_producer_;
    return q;
  }
  int inside_producer_ = 0;
  static bool shape(const tensor& t, std::size_t rows, std::size_t cols) { return t.defined() && t.rows() == rows && t.cols() == cols; }
  static bool like(const tensor& t, const tensor& u) { return shape(t, u.rows(), u.cols()) && t.type() == u.type(); }
  static bool scalar64(const tensor& t) { return shape(t, 1, 1) && t.type() == dtype::f64; }

  allocation do_alloc(std::size_t bytes, bool zero_fill) override {
    hit(backend_op::alloc, true);
    return host_backend::do_alloc(bytes, zero_fill);
  }
  void do_write(tensor& t, const std::vector<double>& v) override {
    hit(backend_op::write, v.size() == t.size());
    host_backend::do_write(t, v);
  }
  void do_write_tokens(tensor& t, const std::vector<std::int32_t>& v) override {
    hit(backend_op::write_tokens, shape(t, v.size(), 1) && t.type() == dtype::i32);
    host_backend::do_write_tokens(t, v);
  }
  std::vector<double> do_read(const tensor& t) const override {
    ++reads;
    const_cast<checking_backend*>(this)->hit(backend_op::read, t.defined());
    return host_backend::do_read(t);
  }
  void do_fill(tensor& t, double v) override {
    hit(backend_op::fill, t.defined());
    host_backend::do_fill(t, v);
  }
  void do_copy(const tensor& s, tensor& d) override {
    hit(backend_op::copy, like(s, d));
    host_backend::do_copy(s, d);
  }
  void do_axpy(double a, const tensor& x, tensor& y) override {
    hit(backend_op::axpy, like(x, y));
    host_backend::do_axpy(a, x, y);
  }
  void do_amax(const tensor& x, tensor& out) override {
    hit(backend_op::amax, scalar64(out));
    host_backend::do_amax(x, out);
  }
  void do_copy_amax(const tensor& x, const quant_request& r, tensor& out) override {
    hit(backend_op::copy_amax, shape(out, 1, 1) && out.type() == dtype::f32 && has_tensor_scale(r));
    host_backend::do_copy_amax(x, r, out);
  }
  qtensor do_quantize(const tensor& x, const quant_request& r) override {
    hit(backend_op::quantize, r.spec.kind() != precision::fp8 || (r.fp8.table && r.fp8.row < r.fp8.table->rows()));
    return host_backend::do_quantize(x, r);
  }
  qpair do_quantize_both(const tensor& x, const quant_request& a, const quant_request& b) override {
    hit(backend_op::quantize_both, a.axis == block_axis::rowwise && b.axis == block_axis::columnwise);
    return host_backend::do_quantize_both(x, a, b);
  }
  qtensor do_transpose(const qtensor& q, operand_use u, mem_tag t) override {
    hit(backend_op::transpose, backend::columnwise_is_transpose(q.kind()) && q.axis() == block_axis::rowwise);
    return host_backend::do_transpose(q, u, t);
  }
  host_fp8 do_export_fp8(const tensor& w, fp8_type t, float s) override {
    ++reads;
    hit(backend_op::export_fp8, s > 0.0f);
    return host_backend::do_export_fp8(w, t, s);
  }
  qtensor do_import_fp8(const host_fp8& h, operand_use u, mem_tag t) override {
    hit(backend_op::import_fp8, h.codes() != nullptr || h.bytes() == 0);
    return host_backend::do_import_fp8(h, u, t);
  }
  void do_update_scales(scaling_table& t) override {
    hit(backend_op::update_scales, shape(t.history(), t.rows(), t.config().history_length));
    host_backend::do_update_scales(t);
  }
  void do_gemm(gemm_product k, const qtensor& a, const qtensor& b, tensor& d, float al, float be, const tensor* c) override {
    hit(backend_op::gemm, a.kind() == b.kind() && a.length() == b.length() && shape(d, a.lines(), b.lines()) && (!c || like(*c, d)));
    host_backend::do_gemm(k, a, b, d, al, be, c);
  }
  bool norm_ok(const tensor& x, const tensor& w, const tensor& rstd) const {
    return shape(w, 1, x.cols()) && shape(rstd, x.rows(), 1) && rstd.type() == stat_type(x.type());
  }
  void do_rmsnorm_forward(const tensor& x, const tensor& w, tensor& y, tensor& rstd, double eps) override {
    hit(backend_op::rmsnorm_forward, norm_ok(x, w, rstd) && like(y, x));
    host_backend::do_rmsnorm_forward(x, w, y, rstd, eps);
  }
  qpair do_rmsnorm_quantize(const tensor& x, const tensor& w, tensor& rstd, double eps, const quant_plan& p, tensor* y) override {
    hit(backend_op::rmsnorm_quantize, norm_ok(x, w, rstd) && (!y || like(*y, x)) && p.rowwise.axis == block_axis::rowwise);
    return producer([&] { return host_backend::do_rmsnorm_quantize(x, w, rstd, eps, p, y); });
  }
  void do_rmsnorm_backward(const tensor& dy, const tensor& x, const tensor& w, const tensor& rstd, const tensor& dr, tensor& dx,
                           tensor* dw) override {
    hit(backend_op::rmsnorm_backward, norm_ok(x, w, rstd) && like(dy, x) && like(dr, x) && like(dx, x) && (!dw || like(*dw, w)));
    host_backend::do_rmsnorm_backward(dy, x, w, rstd, dr, dx, dw);
  }
  void do_rope(tensor& qkv, const head_shape& s, const rope_frequencies& f, bool inv) override {
    hit(backend_op::rope, shape(qkv, s.tokens(), s.qkv_dim()) && s.head_dim % 2 == 0 && f.theta > 0.0);
    host_backend::do_rope(qkv, s, f, inv);
  }
  void do_attention_forward(const tensor& qkv, tensor& out, tensor& lse, const head_shape& s) override {
    hit(backend_op::attention_forward, shape(qkv, s.tokens(), s.qkv_dim()) && shape(out, s.tokens(), s.q_dim()) &&
                                           shape(lse, s.batch * s.n_heads, s.seq) && s.n_heads % s.n_kv_heads == 0);
    host_backend::do_attention_forward(qkv, out, lse, s);
  }
  void do_attention_backward(const tensor& dout, const tensor& qkv, const tensor& out, const tensor& lse, tensor& dqkv,
                             const head_shape& s) override {
    hit(backend_op::attention_backward, like(dout, out) && shape(out, s.tokens(), s.q_dim()) && like(dqkv, qkv) &&
                                            shape(qkv, s.tokens(), s.qkv_dim()) && shape(lse, s.batch * s.n_heads, s.seq));
    host_backend::do_attention_backward(dout, qkv, out, lse, dqkv, s);
  }
  void do_swiglu_forward(const tensor& gu, tensor& out) override {
    hit(backend_op::swiglu_forward, shape(out, gu.rows(), gu.cols() / 2) && gu.cols() % 2 == 0);
    host_backend::do_swiglu_forward(gu, out);
  }
  qpair do_swiglu_quantize(const tensor& gu, const quant_plan& p, tensor* out) override {
    hit(backend_op::swiglu_quantize, gu.cols() % 2 == 0 && (!out || shape(*out, gu.rows(), gu.cols() / 2)));
    return producer([&] { return host_backend::do_swiglu_quantize(gu, p, out); });
  }
  void do_swiglu_backward(const tensor& dout, const tensor& gu, tensor& dgu) override {
    hit(backend_op::swiglu_backward, shape(dout, gu.rows(), gu.cols() / 2) && like(dgu, gu));
    host_backend::do_swiglu_backward(dout, gu, dgu);
  }
  qpair do_swiglu_backward_quantize(tensor& dout, tensor& gu, const quant_plan& p) override {
    hit(backend_op::swiglu_backward_quantize, shape(dout, gu.rows(), gu.cols() / 2) && p.rowwise.axis == block_axis::rowwise);
    return producer([&] { return host_backend::do_swiglu_backward_quantize(dout, gu, p); });
  }
  void do_embedding_forward(const tensor& tokens, const tensor& table, tensor& out) override {
    hit(backend_op::embedding_forward, tokens.type() == dtype::i32 && shape(out, tokens.rows(), table.cols()));
    host_backend::do_embedding_forward(tokens, table, out);
  }
  void do_embedding_backward(const tensor& tokens, const tensor& dout, tensor& dtable) override {
    hit(backend_op::embedding_backward, tokens.type() == dtype::i32 && shape(dout, tokens.rows(), dtable.cols()));
    host_backend::do_embedding_backward(tokens, dout, dtable);
  }
  void do_cross_entropy(tensor& logits, const tensor& targets, const tensor* mask, std::size_t first, tensor* row_loss, tensor* loss,
                        bool g) override {
    hit(backend_op::cross_entropy, first + logits.rows() <= targets.rows() && targets.type() == dtype::i32 && (!loss || scalar64(*loss)) &&
                                       (!mask || shape(*mask, targets.rows(), 1)) && (!row_loss || shape(*row_loss, targets.rows(), 1)) &&
                                       (row_loss || !loss));
    host_backend::do_cross_entropy(logits, targets, mask, first, row_loss, loss, g);
  }
  void do_global_norm(std::span<const tensor* const> ts, double mx, tensor& norm, tensor& clip) override {
    hit(backend_op::global_norm, scalar64(norm) && scalar64(clip));
    host_backend::do_global_norm(ts, mx, norm, clip);
  }
  void do_adamw_step(std::span<const adamw_slot_ref> slots, const adamw_args& a, const tensor& norm, const tensor& clip,
                     tensor& state) override {
    bool ok = scalar64(norm) && scalar64(clip) && shape(state, 1, 2);
    for (const adamw_slot_ref& s : slots) ok = ok && like(*s.grad, *s.param) && like(*s.m, *s.param) && like(*s.v, *s.param);
    hit(backend_op::adamw_step, ok);
    host_backend::do_adamw_step(slots, a, norm, clip, state);
  }
};

}  // namespace

TEST_CASE("backend: every public call reaches the backend once, checked; a bad call never reaches it", "[nn][backend]") {
  for (const recipe& r : {recipes::fp8_delayed({4, amax_algorithm::max, 0}), recipes::mxfp4_amd(), recipes::bf16()}) {
    INFO(r.name);
    checking_backend be;
    model m(be, tiny_model(), r, 3);
    m.freeze_all();
    m.add_lora({}, {4, 8.0}, 5);  // adapters: high-precision inputs of the fused producers too
    train_config c = short_run(3);
    if (!r.uses(precision::fp8)) c.heal_step = 2;  // the MXFP4 -> FP8 switch: export, import, transpose
    trainer t(m, text_tokens(), c);
    t.run();
    CHECK(evaluate(m, sequential_batches(text_tokens(), {2, 32}, 2)) > 0.0);
    CHECK(be.violations == 0);
    for (std::size_t o = 0; o < backend_op_count; ++o) {
      INFO("operation " << o);
      CHECK(be.counters().calls[o] == be.reached[o]);
    }
    for (backend_op o : {backend_op::rmsnorm_quantize, backend_op::swiglu_quantize, backend_op::swiglu_backward_quantize,
                         backend_op::attention_backward, backend_op::adamw_step,
                         backend_op::global_norm, backend_op::cross_entropy, backend_op::gemm})
      CHECK(be.at(o) > 0);
    if (r.uses(precision::fp8)) CHECK(be.at(backend_op::update_scales) == 3);  // one fused update per step
  }

  checking_backend be;
  const head_shape s{2, 4, 2, 1, 8};
  tensor qkv = random_tensor(be, s.tokens(), s.qkv_dim(), 1), out = be.alloc(s.tokens(), s.q_dim(), dtype::f32, mem_tag::activation);
  tensor lse = be.alloc(s.batch * s.n_heads, s.seq, dtype::f32, mem_tag::activation);
  tensor bad_lse = be.alloc(s.batch * s.n_heads, s.seq + 1, dtype::f32, mem_tag::activation);
  tensor lse64 = be.alloc(s.batch * s.n_heads, s.seq, dtype::f64, mem_tag::activation);
  tensor w = random_tensor(be, 1, s.qkv_dim(), 2), rstd = be.alloc(s.tokens() + 1, 1, dtype::f32, mem_tag::activation);
  tensor rstd_ok = be.alloc(s.tokens(), 1, dtype::f32, mem_tag::activation);
  tensor loss = be.alloc(1, 1, dtype::f32, mem_tag::activation), targets = be.alloc(s.tokens(), 1, dtype::i32, mem_tag::activation);
  tensor g = be.alloc(2, 2, dtype::f32, mem_tag::gradient), m1 = be.alloc(2, 3, dtype::f32, mem_tag::optimizer);
  tensor norm = be.scalar(), clip = be.scalar(), state = be.alloc(1, 2, dtype::f64, mem_tag::optimizer);
  const std::vector<adamw_slot_ref> slots = {{&g, &g, &m1, &g, 0.0}};
  const auto before = be.reached;
  const auto calls_before = be.counters().calls;
  CHECK_THROWS_WITH(be.attention_forward(qkv, out, bad_lse, s), mxkit_test::contains("attention log-sum-exp: tensor is 4x5, expected 4x4"));
  CHECK_THROWS_WITH(be.attention_forward(qkv, out, lse64, s), mxkit_test::contains("element type is f64, expected f32"));
  CHECK_THROWS_WITH(be.attention_forward(qkv, out, lse, {2, 4, 3, 2, 8}), mxkit_test::contains("not a multiple of n_kv_heads"));
  CHECK_THROWS_WITH(be.attention_backward(out, qkv, out, lse, out, s), mxkit_test::contains("dqkv"));
  CHECK_THROWS_WITH(be.rmsnorm_forward(qkv, w, qkv, rstd, 1e-5), mxkit_test::contains("rmsnorm rstd"));
  CHECK_THROWS_WITH(be.rmsnorm_backward(qkv, qkv, w, rstd_ok, qkv, nullptr, &out),
                    mxkit_test::contains("rmsnorm backward residual gradient: tensor is 8x16, expected 8x32"));
  CHECK_THROWS_WITH(be.swiglu_forward(qkv, qkv), mxkit_test::contains("swiglu output"));
  CHECK_THROWS_WITH(be.cross_entropy(qkv, targets, loss, true), mxkit_test::contains("cross_entropy loss"));
  CHECK_THROWS_WITH(be.adamw_step(slots, {}, norm, clip, state), mxkit_test::contains("adamw gradient/moment"));
  CHECK_THROWS_WITH(be.amax(qkv, loss), mxkit_test::contains("amax output"));
  CHECK(be.counters().calls == calls_before);  // refused calls are not counted either
  CHECK(be.reached == before);  // nothing reached the backend
  CHECK(be.violations == 0);
}

TEST_CASE("backend: a training step reads nothing back but at its logging steps, and allocates nothing once warm", "[nn][backend]") {
  for (const recipe& r : {recipes::fp8_delayed({4, amax_algorithm::max, 0}), recipes::mxfp4_nvidia_style()}) {
    INFO(r.name);
    for (const bool progress : {false, true}) {
      INFO("progress callback " << progress);
      checking_backend be;
      model m(be, tiny_model(), r, 3);
      train_config c = short_run(8);
      c.log_every = 4;
      std::size_t callbacks = 0;
      if (progress) {
        c.progress_every = 4;
        c.on_progress = [&](const train_progress& p) {
          ++callbacks;
          CHECK(std::isfinite(p.loss));
          CHECK(p.grad_norm > 0.0);
        };
      }
      trainer t(m, text_tokens(), c);
      std::vector<std::uint64_t> reads, driver;
      for (int i = 0; i < 8; ++i) {
        const std::uint64_t r0 = be.reads, h0 = be.counters().host_reads, d0 = be.counters().driver_allocations;
        t.step();
        reads.push_back(be.reads - r0);
        CHECK(be.counters().host_reads - h0 == reads.back());
        driver.push_back(be.counters().driver_allocations - d0);
      }
      const std::uint64_t at_log = progress ? 2 : 1;  // the loss sum (and the gradient norm for the callback)
      CHECK(reads == std::vector<std::uint64_t>{0, 0, 0, at_log, 0, 0, 0, at_log});
      CHECK(callbacks == (progress ? 2u : 0u));
      REQUIRE(t.losses().size() == 2);  // the mean of steps 1-4 and of steps 5-8
      CHECK(t.losses()[1] < t.losses()[0]);
      CHECK(driver[0] > 0);  // the first step fills the pool
      for (std::size_t i = 2; i < driver.size(); ++i) CHECK(driver[i] == 0);
      CHECK(be.counters().synchronizations == 0);
    }
  }
}

TEST_CASE("backend: the trainer's logged loss is the mean of the window's losses", "[nn][backend]") {
  std::vector<double> every, windows;
  for (const std::size_t log_every : {std::size_t{1}, std::size_t{3}}) {
    host_backend be;
    model m(be, tiny_model(), recipes::bf16(), 3);
    train_config c = short_run(7);
    c.log_every = log_every;
    trainer t(m, text_tokens(), c);
    t.run();
    (log_every == 1 ? every : windows) = t.losses();
  }
  REQUIRE(every.size() == 7);
  REQUIRE(windows.size() == 3);  // steps 1-3, 4-6, 7
  CHECK(windows[0] == Approx((every[0] + every[1] + every[2]) / 3).epsilon(1e-15));
  CHECK(windows[1] == Approx((every[3] + every[4] + every[5]) / 3).epsilon(1e-15));
  CHECK(windows[2] == every[6]);
  host_backend be;
  model m(be, tiny_model(), recipes::bf16(), 3);
  train_config c = short_run(4);
  c.log_every = 3;
  c.progress_every = 4;
  CHECK_THROWS_WITH(trainer(m, text_tokens(), c), mxkit_test::contains("multiple of log_every"));
}

TEST_CASE("backend: bf16 activations are computed in float and rounded once on store", "[nn][backend]") {
  host_backend be;
  constexpr std::size_t M = 8, C = 32;
  tensor xb = random_tensor(be, M, C, 1, 1.0, dtype::bf16), w = random_tensor(be, 1, C, 2, 0.5);
  tensor xf = be.alloc(M, C, dtype::f32, mem_tag::activation);
  be.write(xf, be.read(xb));  // the same values, widened
  tensor yb = be.alloc(M, C, dtype::bf16, mem_tag::activation), yf = be.alloc(M, C, dtype::f32, mem_tag::activation);
  tensor rb = be.alloc(M, 1, dtype::f32, mem_tag::activation), rf = be.alloc(M, 1, dtype::f32, mem_tag::activation);
  be.rmsnorm_forward(xb, w, yb, rb, 1e-5);
  be.rmsnorm_forward(xf, w, yf, rf, 1e-5);
  auto rounded = [&](const tensor& t) {
    std::vector<double> out;
    for (double v : be.read(t)) out.push_back(bfloat16::from_float(static_cast<float>(v), rounding::nearest_even, overflow::propagate).to_float());
    return out;
  };
  CHECK(be.read(yb) == rounded(yf));
  CHECK(be.read(rb) == be.read(rf));  // statistics stay f32
  tensor sb = be.alloc(M, C / 2, dtype::bf16, mem_tag::activation), sf = be.alloc(M, C / 2, dtype::f32, mem_tag::activation);
  be.swiglu_forward(xb, sb);
  be.swiglu_forward(xf, sf);
  CHECK(be.read(sb) == rounded(sf));
  CHECK(yb.bytes() == M * C * 2);
  tensor bad = be.alloc(M, C, dtype::f64, mem_tag::activation);
  CHECK_THROWS_WITH(be.rmsnorm_forward(bad, w, bad, rf, 1e-5), mxkit_test::contains("f64 activations with f32 parameters"));
}

namespace {
// Records every bracket the backend opens and closes; checks they nest.
struct recording_observer final : backend_observer {
  std::vector<backend_event> open;
  std::array<std::uint64_t, backend_op_count> begun{}, ended{};
  std::uint64_t gemm_products[3]{};
  bool nested_ok = true;
  void begin(const backend_event& e) override {
    open.push_back(e);
    ++begun[static_cast<std::size_t>(e.op)];
    if (e.op == backend_op::gemm) {
      if (e.product < 0 || e.product > 2) nested_ok = false;
      else ++gemm_products[e.product];
    } else if (e.product != -1) {
      nested_ok = false;
    }
  }
  void end(const backend_event& e) override {
    if (open.empty() || open.back().op != e.op || open.back().product != e.product) nested_ok = false;
    if (!open.empty()) open.pop_back();
    ++ended[static_cast<std::size_t>(e.op)];
  }
};
}  // namespace

TEST_CASE("backend: the observer brackets every counted operation once, nested, and only while installed", "[nn][backend]") {
  for (const recipe& r : {recipes::bf16(), recipes::fp8_delayed({4, amax_algorithm::max, 0}), recipes::mxfp4()}) {
    INFO(r.name);
    host_backend be;
    model m(be, tiny_model(), r, 3);
    trainer t(m, text_tokens(), short_run(3));
    t.step();  // warm: the observer sees a steady-state step
    recording_observer obs;
    const backend_counters before = be.counters();
    be.set_observer(&obs);
    CHECK(be.observer() == &obs);
    t.step();
    be.set_observer(nullptr);
    CHECK(obs.nested_ok);
    CHECK(obs.open.empty());
    std::uint64_t total = 0;
    for (std::size_t o = 0; o < backend_op_count; ++o) {
      INFO(name_of(static_cast<backend_op>(o)));
      CHECK(obs.begun[o] == be.counters().calls[o] - before.calls[o]);
      CHECK(obs.ended[o] == obs.begun[o]);
      total += obs.begun[o];
    }
    CHECK(total > 0);
    for (std::size_t g = 0; g < 3; ++g) CHECK(obs.gemm_products[g] == be.counters().gemms[g] - before.gemms[g]);
    CHECK(obs.gemm_products[0] > 0);
    const auto seen = obs.begun;
    t.step();  // removed: sees nothing more
    CHECK(obs.begun == seen);
  }
}

TEST_CASE("backend: an operation refused by its checks is not observed", "[nn][backend]") {
  host_backend be;
  recording_observer obs;
  be.set_observer(&obs);
  tensor a = be.alloc(2, 3, dtype::f32, mem_tag::activation), b = be.alloc(3, 2, dtype::f32, mem_tag::activation);
  CHECK_THROWS_AS(be.copy(a, b), std::invalid_argument);  // refused before do_copy: no bracket
  CHECK(obs.begun[static_cast<std::size_t>(backend_op::copy)] == 0);
  CHECK(obs.begun[static_cast<std::size_t>(backend_op::alloc)] == 2);
  CHECK(obs.ended[static_cast<std::size_t>(backend_op::alloc)] == 2);
  be.set_observer(nullptr);
}

TEST_CASE("backend: a block-scaled request in a format with no training path is refused by name", "[nn][backend]") {
  // The MX formats and NVFP4 train (block_scaled_spec::check_trainable); any other block_format
  // value (here E8M0 scales on blocks of 16) is refused by quantize before the backend sees it.
  host_backend be;
  const tensor x = random_tensor(be, 32, 64, 1);
  const block_format e8m0_16{element_kind::e2m1, {1, 16}, block_scale_type::e8m0, tensor_scale_type::none};
  quant_request r;
  r.spec = recipes::block_scaled_operand(e8m0_16, scale_rule::floor);
  CHECK_THROWS_WITH(be.quantize(x, r), mxkit_test::contains("quantize: block-scaled operand in unknown block format, which no backend trains with"));
  quant_request c = r;
  c.axis = block_axis::columnwise;
  CHECK_THROWS_WITH(be.quantize_both(x, r, c), mxkit_test::contains("which no backend trains with (the MX formats and NVFP4 do)"));
  CHECK(be.counters().copies(operand_use::fprop_x) == 0);
}

TEST_CASE("backend: NVFP4 requests give ref::quantize's copies, with their tensor scales", "[nn][backend]") {
  // An NVFP4 copy on the host backend is ref/nvfp4_quantize.hpp's, options from the request
  // (nvfp4_quantize_options: rounding, rotation and sign mask, Philox key and stream).
  host_backend be;
  const tensor x = random_tensor(be, 32, 64, 1);
  const std::vector<double> xv = be.read(x);
  const std::vector<float> xf(xv.begin(), xv.end());
  for (const block_format& f : {formats::nvfp4, formats::nvfp4_2d})
    for (const bool sr : {false, true}) {
      INFO(nvfp4_format_name(f) << (sr ? ", stochastic, random-sign hadamard" : ""));
      quant_request r;
      r.spec = recipes::block_scaled_operand(f, scale_rule::floor, sr ? rounding::stochastic : rounding::nearest_even);
      r.block = {sr, sr, 0x1234, 7};
      quant_request c = r;
      c.axis = block_axis::columnwise;
      const nvfp4_options o = r.nvfp4_quantize_options();
      CHECK(o.round == (sr ? rounding::stochastic : rounding::nearest_even));
      CHECK(o.hadamard == sr);
      CHECK(o.hadamard_signs == (sr ? hadamard_sign_mask(0x1234) : 0u));
      const matrix_view<const float> v{xf.data(), 32, 64};
      const nvfp4_tensor wr = ref::quantize(v, f, block_axis::rowwise, o), wc = ref::quantize(v, f, block_axis::columnwise, o);
      const qpair both = be.quantize_both(x, r, c);
      for (const auto& [q, want] : {std::pair{be.quantize(x, r), &wr}, std::pair{be.quantize(x, c), &wc}, std::pair{both.rowwise, &wr},
                                    std::pair{both.columnwise, &wc}}) {
        const nvfp4_tensor& got = host_backend::nvfp4(q);
        CHECK(std::ranges::equal(got.data(), want->data()));
        CHECK(std::ranges::equal(got.scales(), want->scales()));
        CHECK(got.tensor_scale() == want->tensor_scale());
        CHECK(q.bytes() == want->bytes());
      }
    }
}

TEST_CASE("backend: an NVFP4 request with a given tensor amax takes that amax's tensor scale; slabs that disagree are refused",
          "[nn][backend]") {
  // copy_amax is ref's amax of the copy (its finite values, rotated when the request rotates); a
  // request's tensor_amax gives ref::quantize the tensor scale of that amax. The copy gather's
  // assembly refuses slabs whose tensor scales differ (each quantized with its own amax would).
  host_backend be;
  tensor x = random_tensor(be, 64, 64, 3);
  const std::vector<double> xv = be.read(x);
  std::vector<float> xf(xv.begin(), xv.end());
  xf[5] = std::numeric_limits<float>::infinity();  // not finite: no part of the amax
  xf[70] = std::nanf("");
  be.write(x, std::vector<double>(xf.begin(), xf.end()));
  const matrix_view<const float> v{xf.data(), 64, 64};
  for (const bool rotate : {false, true}) {
    INFO((rotate ? "rotated" : "not rotated"));
    quant_request r;
    r.spec = recipes::block_scaled_operand(formats::nvfp4, scale_rule::floor);
    r.block = {rotate, rotate, 0x77, 3};
    const nvfp4_options o = r.nvfp4_quantize_options();
    tensor a = be.alloc(1, 1, dtype::f32, mem_tag::quantized_weight);
    be.copy_amax(x, r, a);
    const float want_amax = detail::nvfp4_copy_amax(v, block_layout{formats::nvfp4, block_axis::rowwise, 64, 64}, o, false, 0);
    CHECK(std::isfinite(want_amax));
    CHECK(static_cast<float>(be.read(a)[0]) == want_amax);
    CHECK(be.counters().op_calls(backend_op::copy_amax) == (rotate ? 2u : 1u));
    be.write(a, {1000.0});
    r.tensor_amax = a;
    const qtensor q = be.quantize(x, r);
    const nvfp4_tensor& got = host_backend::nvfp4(q);
    const nvfp4_tensor want = ref::quantize(v, formats::nvfp4, block_axis::rowwise, o, nvfp4_tensor_scale(1000.0f));
    CHECK(got.tensor_scale() == nvfp4_tensor_scale(1000.0f));
    CHECK(std::ranges::equal(got.data(), want.data()));
    CHECK(std::ranges::equal(got.scales(), want.scales()));
  }
  // Two slabs, each with its own amax: the assembly refuses them by the rows and scales.
  quant_request r;
  r.spec = recipes::block_scaled_operand(formats::nvfp4, scale_rule::floor);
  const std::size_t slab_bytes = copy_gather::copy_wire_bytes(r, 32, 64);
  tensor wire = be.alloc(1, (2 * slab_bytes + 3) / 4, dtype::f32, mem_tag::quantized_weight);
  const copy_slab slabs[] = {{0, 0, 32}, {slab_bytes, 32, 32}};
  for (const copy_slab& s : slabs) {
    quant_request own = r;
    own.tensor_amax = be.alloc(1, 1, dtype::f32, mem_tag::quantized_weight);
    const tensor slab = view_of(x, s.first_row * 64, 32, 64);
    be.copy_amax(slab, own, own.tensor_amax);
    be.pack_copy(be.quantize(slab, own), wire, s.byte_offset);
  }
  CHECK_THROWS_WITH(be.assemble_copy(r, 64, 64, wire, slabs), mxkit_test::contains("assemble_copy: the slab at row 32 has tensor scale"));
}
