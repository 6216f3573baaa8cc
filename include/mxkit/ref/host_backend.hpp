#pragma once
// The host reference backend: every kernel of nn/backend.hpp on the CPU, single-threaded and
// deterministic. Quantization is mxkit's host quantizer (ref/quantize.hpp, fp8_tensor.hpp),
// GEMMs are the named training products of ref/gemm.hpp (ref::product: fprop, dgrad,
// wgrad, which check that each MX copy has the right block axis), with alpha/beta:
//   mx      quantize / quantize_both, ref::product on the MX copies
//   fp8     quantize_fp8 (+ transpose for the columnwise copy), ref::product on fp8 views
//   bf16    values rounded to bfloat16 (RNE) and stored as bfloat16; the GEMM widens both
//           operands to float once and runs ref::product on the float views, which gives
//           the same bits as on bfloat16 views (same floats, same order; tested) at float speed
//   native  the tensor's own values (f32: ref::product; f64: a double loop, gradient check)
// Layer kernels are the ref:: functions of ref/nn/ (rmsnorm.hpp, attention.hpp, ...).
// Not final: tests derive from it to record the requests the layers make.
#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <variant>
#include <vector>

#include <mxkit/checked_arithmetic.hpp>
#include <mxkit/error.hpp>
#include <mxkit/format/float16.hpp>
#include <mxkit/nn/backend.hpp>
#include <mxkit/ref/gemm.hpp>
#include <mxkit/ref/nn/adamw.hpp>
#include <mxkit/ref/nn/attention.hpp>
#include <mxkit/ref/nn/cross_entropy.hpp>
#include <mxkit/ref/nn/embedding.hpp>
#include <mxkit/ref/nn/rmsnorm.hpp>
#include <mxkit/ref/nn/rope.hpp>
#include <mxkit/ref/nn/swiglu.hpp>
#include <mxkit/ref/quantize.hpp>
#include <mxkit/tensor/fp8_tensor.hpp>

MXKIT_BEGIN_NAMESPACE
namespace ref {

class host_backend : public nn::backend {
 public:
  // Storage of one quantized copy in host memory.
  struct payload final : nn::qpayload {
    std::variant<mx_tensor, fp8_tensor, std::vector<bfloat16>, std::vector<float>, std::vector<double>> data;
    nn::tracked_bytes tracked;
    std::size_t* live = nullptr;  // the backend's count of live copies of this kind
    payload() = default;
    payload(const payload&) = delete;
    payload& operator=(const payload&) = delete;
    ~payload() override {
      if (live) --*live;
    }
  };

  // Quantized copies of kind p alive right now (anywhere: caches, saved operands, callers).
  std::size_t live_copies(nn::precision p) const noexcept { return live_[static_cast<std::size_t>(p)]; }

  const char* name() const noexcept override { return "host"; }

  // ---- memory
  nn::tensor alloc(std::size_t rows, std::size_t cols, nn::dtype type, nn::mem_tag tag) override {
    struct block {
      std::vector<double> mem;  // double elements: aligned for either dtype
      nn::tracked_bytes tracked;
    };
    // rows * cols * size_of(type) must not wrap around: a small buffer behind a huge shape. At
    // most one object's bytes, so the round-up to whole doubles below cannot wrap either.
    const std::size_t elements = detail::checked_mul({"rows", rows}, {"cols", cols}, "alloc: a ", rows, "x", cols, " ",
                                                     name_of(type), " tensor does not fit in memory");
    const std::size_t bytes = detail::checked_bytes({"rows x cols", elements}, nn::size_of(type), "alloc: a ", rows, "x", cols,
                                                    " ", name_of(type), " tensor does not fit in memory");
    auto b = std::make_shared<block>();
    b->mem.assign((bytes + 7) / 8, 0.0);
    b->tracked = nn::tracked_bytes(&memory_, tag, bytes);
    void* data = b->mem.data();
    return nn::tensor(type, rows, cols, data, std::move(b));
  }
  void write(nn::tensor& t, const std::vector<double>& values) override {
    detail::require(values.size() == t.size(), "write: ", values.size(), " values for a ", t.rows(), "x", t.cols(), " tensor");
    dispatch(t.type(), [&](auto z) {
      using T = decltype(z);
      T* p = t.as<T>();
      for (std::size_t i = 0; i < values.size(); ++i) p[i] = static_cast<T>(values[i]);
    });
  }
  std::vector<double> read(const nn::tensor& t) const override {
    std::vector<double> out(t.size());
    dispatch(t.type(), [&](auto z) {
      using T = decltype(z);
      const T* p = t.as<T>();
      for (std::size_t i = 0; i < out.size(); ++i) out[i] = p[i];
    });
    return out;
  }
  void fill(nn::tensor& t, double value) override {
    dispatch(t.type(), [&](auto z) {
      using T = decltype(z);
      T* p = t.as<T>();
      for (std::size_t i = 0; i < t.size(); ++i) p[i] = static_cast<T>(value);
    });
  }
  void copy(const nn::tensor& src, nn::tensor& dst) override {
    nn::require_shape(dst, src.rows(), src.cols(), "copy destination");
    same_type(src, dst, "copy");
    dispatch(src.type(), [&](auto z) {
      using T = decltype(z);
      const T* s = src.as<T>();
      T* d = dst.as<T>();
      for (std::size_t i = 0; i < src.size(); ++i) d[i] = s[i];
    });
  }
  void axpy(double alpha, const nn::tensor& x, nn::tensor& y) override {
    nn::require_shape(y, x.rows(), x.cols(), "axpy y");
    same_type(x, y, "axpy");
    dispatch(x.type(), [&](auto z) {
      using T = decltype(z);
      const T* s = x.as<T>();
      T* d = y.as<T>();
      const T a = static_cast<T>(alpha);
      for (std::size_t i = 0; i < x.size(); ++i) d[i] += a * s[i];
    });
  }
  double sum_squares(const nn::tensor& t) const override {
    double ss = 0.0;
    dispatch(t.type(), [&](auto z) {
      using T = decltype(z);
      const T* p = t.as<T>();
      for (std::size_t i = 0; i < t.size(); ++i) ss += static_cast<double>(p[i]) * p[i];
    });
    return ss;
  }
  double amax(const nn::tensor& t) const override {
    double m = 0.0;
    dispatch(t.type(), [&](auto z) {
      using T = decltype(z);
      const T* p = t.as<T>();
      for (std::size_t i = 0; i < t.size(); ++i) {
        const double a = std::fabs(static_cast<double>(p[i]));
        if (std::isnan(a) || a > m) m = a;
        if (std::isnan(m)) break;
      }
    });
    return m;
  }

  // ---- quantized operands
  nn::qtensor quantize(const nn::tensor& x, const nn::quant_request& r) override {
    detail::require(x.defined(), "quantize: input tensor is not allocated");
    count(r.use);
    auto p = std::make_shared<payload>();
    float amax = 0.0f;
    if (r.spec.kind == nn::precision::native) {
      dispatch(x.type(), [&](auto z) {
        using T = decltype(z);
        p->data = stored_copy<T>(x.as<T>(), x.rows(), x.cols(), r.axis, [](T v) { return v; });
      });
    } else {
      const std::vector<float> widened = x.type() == nn::dtype::f64 ? to_float(x) : std::vector<float>{};
      const float* xf = x.type() == nn::dtype::f64 ? widened.data() : x.as<float>();
      const matrix_view<const float> view{xf, x.rows(), x.cols()};
      switch (r.spec.kind) {
        case nn::precision::bf16:
          p->data = stored_copy<bfloat16>(xf, x.rows(), x.cols(), r.axis,
                                       [](float v) { return bfloat16::from_float(v, rounding::nearest_even, overflow::propagate); });
          break;
        case nn::precision::fp8: {
          fp8_tensor f = quantize_fp8(view, r.spec.fp8, r.fp8_scale);
          amax = f.amax;
          p->data = r.axis == block_axis::rowwise ? std::move(f) : mxkit::transpose(f);
          break;
        }
        case nn::precision::mx: p->data = mxkit::quantize(view, r.spec.mx, r.axis, r.mx); break;
        case nn::precision::native: break;
      }
    }
    return finish(r, x.rows(), x.cols(), amax, std::move(p));
  }

  nn::qpair quantize_both(const nn::tensor& x, const nn::quant_request& row, const nn::quant_request& col) override {
    detail::require(row.axis == block_axis::rowwise && col.axis == block_axis::columnwise,
                    "quantize_both: the requests must be one rowwise and one columnwise copy");
    const bool same_mx = row.spec.kind == nn::precision::mx && col.spec.kind == nn::precision::mx && row.spec.mx == col.spec.mx &&
                         same_options(row.mx, col.mx) && x.type() == nn::dtype::f32;
    if (same_mx) {  // one call of mxkit::quantize_both, as the fused kernel would produce them
      count(row.use);
      count(col.use);
      mx_tensor_pair both = mxkit::quantize_both(matrix_view<const float>{x.as<float>(), x.rows(), x.cols()}, row.spec.mx, row.mx);
      auto pr = std::make_shared<payload>(), pc = std::make_shared<payload>();
      pr->data = std::move(both.rowwise);
      pc->data = std::move(both.columnwise);
      return {finish(row, x.rows(), x.cols(), 0.0f, std::move(pr)), finish(col, x.rows(), x.cols(), 0.0f, std::move(pc))};
    }
    const bool same_fp8 = row.spec.kind == nn::precision::fp8 && col.spec.kind == nn::precision::fp8 && row.spec.fp8 == col.spec.fp8 &&
                          row.fp8_scale == col.fp8_scale;
    if (same_fp8) {  // one cast, one transpose (per-tensor scale)
      nn::qtensor r = host_backend::quantize(x, row);
      return {r, host_backend::transpose(r, col.use, col.tag)};
    }
    return {host_backend::quantize(x, row), host_backend::quantize(x, col)};
  }

  nn::qtensor transpose(const nn::qtensor& q, nn::operand_use use, nn::mem_tag tag) override {
    detail::require(q.kind() == nn::precision::fp8 && q.axis() == block_axis::rowwise, "transpose: needs an FP8 rowwise copy, got a ",
                    name_of(q.kind()), " ", name_of(q.axis()), " copy");
    count(use);
    auto p = std::make_shared<payload>();
    p->data = mxkit::transpose(fp8(q));
    nn::quant_request r = q.request();
    r.axis = block_axis::columnwise;
    r.use = use;
    r.tag = tag;
    return finish(r, q.rows(), q.cols(), q.amax(), std::move(p));
  }

  fp8_tensor export_fp8(const nn::tensor& w, fp8_type type, float scale) override {
    const std::vector<float> widened = w.type() == nn::dtype::f64 ? to_float(w) : std::vector<float>{};
    const float* wf = w.type() == nn::dtype::f64 ? widened.data() : w.as<float>();
    return quantize_fp8(matrix_view<const float>{wf, w.rows(), w.cols()}, type, scale);
  }
  nn::qtensor import_fp8(const fp8_tensor& host, nn::operand_use use, nn::mem_tag tag) override {
    detail::check_fp8_tensor(host, "import_fp8");
    count(use);
    nn::quant_request r;
    r.spec = nn::recipes::mma_operand(host.type);
    r.axis = block_axis::rowwise;
    r.fp8_scale = host.scale;
    r.use = use;
    r.tag = tag;
    auto p = std::make_shared<payload>();
    p->data = host;
    return finish(r, host.rows, host.cols, host.amax, std::move(p));
  }

  void run_gemm(gemm_product kind, const nn::qtensor& a, const nn::qtensor& b, nn::tensor& d, float alpha, float beta) override {
    detail::require(a.defined() && b.defined(), name_of(kind), ": operand not quantized");
    detail::require(a.kind() == b.kind(), name_of(kind), ": operands are ", name_of(a.kind()), " and ", name_of(b.kind()));
    detail::require(a.length() == b.length(), name_of(kind), ": reduction lengths differ: A stored ", a.lines(), "x", a.length(),
                    ", B stored ", b.lines(), "x", b.length());
    nn::require_shape(d, a.lines(), b.lines(), name_of(kind));
    ++counters_.gemms[static_cast<std::size_t>(kind)];
    const std::size_t P = a.lines(), Q = b.lines(), R = a.length();
    if (a.kind() == nn::precision::native && d.type() == nn::dtype::f64) {
      const auto& A = std::get<std::vector<double>>(get(a).data);
      const auto& B = std::get<std::vector<double>>(get(b).data);
      double* D = d.as<double>();
      for (std::size_t i = 0; i < P; ++i)
        for (std::size_t j = 0; j < Q; ++j) {
          double acc = 0.0;
          for (std::size_t k = 0; k < R; ++k) acc += A[i * R + k] * B[j * R + k];
          D[i * Q + j] = beta == 0.0f ? alpha * acc : alpha * acc + beta * D[i * Q + j];
        }
      return;
    }
    // fp32 result: into d directly, or via a temporary for an f64 d (gradient-check models).
    std::vector<float> tmp;
    const gemm_epilogue e = d.type() == nn::dtype::f32 ? gemm_epilogue{alpha, beta} : gemm_epilogue{};
    if (d.type() == nn::dtype::f64) tmp.assign(P * Q, 0.0f);
    const matrix_view<float> D{d.type() == nn::dtype::f32 ? d.as<float>() : tmp.data(), P, Q};
    switch (a.kind()) {
      case nn::precision::mx:
        ref::product(kind, std::get<mx_tensor>(get(a).data).view(), std::get<mx_tensor>(get(b).data).view(), D, e);
        break;
      case nn::precision::fp8: ref::product(kind, as_view(fp8(a)), as_view(fp8(b)), D, e); break;
      case nn::precision::bf16: {
        const std::vector<float> A = widen(std::get<std::vector<bfloat16>>(get(a).data));
        const std::vector<float> B = widen(std::get<std::vector<bfloat16>>(get(b).data));
        ref::product(kind, matrix_view<const float>{A.data(), P, R}, matrix_view<const float>{B.data(), Q, R}, D, e);
        break;
      }
      case nn::precision::native: {
        const auto& A = std::get<std::vector<float>>(get(a).data);
        const auto& B = std::get<std::vector<float>>(get(b).data);
        ref::product(kind, matrix_view<const float>{A.data(), P, R}, matrix_view<const float>{B.data(), Q, R}, D, e);
        break;
      }
    }
    if (d.type() == nn::dtype::f64) {
      double* dd = d.as<double>();
      for (std::size_t i = 0; i < P * Q; ++i) dd[i] = beta == 0.0f ? double{alpha} * tmp[i] : double{alpha} * tmp[i] + double{beta} * dd[i];
    }
  }

  // ---- layer kernels
  void rmsnorm_forward(const nn::tensor& x, const nn::tensor& w, nn::tensor& y, nn::tensor& rstd, double eps) override {
    nn::require_shape(w, 1, x.cols(), "rmsnorm weight");
    nn::require_shape(y, x.rows(), x.cols(), "rmsnorm output");
    nn::require_shape(rstd, x.rows(), 1, "rmsnorm rstd");
    dispatch(x.type(), [&](auto z) {
      using T = decltype(z);
      ref::rmsnorm_forward(x.as<T>(), w.as<T>(), y.as<T>(), rstd.as<T>(), x.rows(), x.cols(), eps);
    });
  }
  void rmsnorm_backward(const nn::tensor& dy, const nn::tensor& x, const nn::tensor& w, const nn::tensor& rstd, nn::tensor& dx, nn::tensor* dw) override {
    nn::require_shape(dy, x.rows(), x.cols(), "rmsnorm backward dY");
    nn::require_shape(dx, x.rows(), x.cols(), "rmsnorm backward dX");
    if (dw) nn::require_shape(*dw, 1, x.cols(), "rmsnorm backward dW");
    dispatch(x.type(), [&](auto z) {
      using T = decltype(z);
      ref::rmsnorm_backward(dy.as<T>(), x.as<T>(), w.as<T>(), rstd.as<T>(), dx.as<T>(), dw ? dw->as<T>() : nullptr, x.rows(),
                             x.cols());
    });
  }
  void rope(nn::tensor& qkv, const nn::head_shape& s, double theta, bool inverse) override {
    check_heads(s);
    nn::require_shape(qkv, s.tokens(), s.qkv_dim(), "rope qkv");
    detail::require(s.head_dim % 2 == 0, "rope: head_dim ", s.head_dim, " must be even");
    dispatch(qkv.type(), [&](auto z) {
      using T = decltype(z);
      ref::rope(qkv.as<T>(), s, theta, inverse);
    });
  }
  void attention_forward(const nn::tensor& qkv, nn::tensor& out, nn::tensor& probs, const nn::head_shape& s) override {
    check_heads(s);
    nn::require_shape(qkv, s.tokens(), s.qkv_dim(), "attention qkv");
    nn::require_shape(out, s.tokens(), s.q_dim(), "attention output");
    nn::require_shape(probs, s.batch * s.n_heads, s.seq * s.seq, "attention probabilities");
    dispatch(qkv.type(), [&](auto z) {
      using T = decltype(z);
      ref::attention_forward(qkv.as<T>(), out.as<T>(), probs.as<T>(), s);
    });
  }
  void attention_backward(const nn::tensor& dout, const nn::tensor& qkv, const nn::tensor& probs, nn::tensor& dqkv, const nn::head_shape& s) override {
    check_heads(s);
    nn::require_shape(dqkv, s.tokens(), s.qkv_dim(), "attention backward dqkv");
    nn::require_shape(dout, s.tokens(), s.q_dim(), "attention backward dout");
    dispatch(qkv.type(), [&](auto z) {
      using T = decltype(z);
      ref::attention_backward(dout.as<T>(), qkv.as<T>(), probs.as<T>(), dqkv.as<T>(), s);
    });
  }
  void swiglu_forward(const nn::tensor& gu, nn::tensor& out) override {
    detail::require(gu.cols() % 2 == 0, "swiglu: gate/up width ", gu.cols(), " is odd");
    nn::require_shape(out, gu.rows(), gu.cols() / 2, "swiglu output");
    dispatch(gu.type(), [&](auto z) {
      using T = decltype(z);
      ref::swiglu_forward(gu.as<T>(), out.as<T>(), gu.rows(), gu.cols() / 2);
    });
  }
  void swiglu_backward(const nn::tensor& dout, const nn::tensor& gu, nn::tensor& dgu) override {
    nn::require_shape(dout, gu.rows(), gu.cols() / 2, "swiglu backward dout");
    nn::require_shape(dgu, gu.rows(), gu.cols(), "swiglu backward dgu");
    dispatch(gu.type(), [&](auto z) {
      using T = decltype(z);
      ref::swiglu_backward(dout.as<T>(), gu.as<T>(), dgu.as<T>(), gu.rows(), gu.cols() / 2);
    });
  }
  void embedding_forward(const std::vector<std::int32_t>& tokens, const nn::tensor& table, nn::tensor& out) override {
    ref::check_tokens(tokens, table.rows());
    nn::require_shape(out, tokens.size(), table.cols(), "embedding output");
    dispatch(table.type(), [&](auto z) {
      using T = decltype(z);
      ref::embedding_forward(tokens.data(), tokens.size(), table.as<T>(), out.as<T>(), table.cols());
    });
  }
  void embedding_backward(const std::vector<std::int32_t>& tokens, const nn::tensor& dout, nn::tensor& dtable) override {
    ref::check_tokens(tokens, dtable.rows());
    nn::require_shape(dout, tokens.size(), dtable.cols(), "embedding backward dout");
    dispatch(dtable.type(), [&](auto z) {
      using T = decltype(z);
      ref::embedding_backward(tokens.data(), tokens.size(), dout.as<T>(), dtable.as<T>(), dtable.cols());
    });
  }
  double cross_entropy(const nn::tensor& logits, const std::vector<std::int32_t>& targets, nn::tensor* dlogits) override {
    detail::require(targets.size() == logits.rows(), "cross_entropy: ", targets.size(), " targets for ", logits.rows(), " rows");
    ref::check_tokens(targets, logits.cols());
    if (dlogits) nn::require_shape(*dlogits, logits.rows(), logits.cols(), "cross_entropy dlogits");
    double loss = 0.0;
    dispatch(logits.type(), [&](auto z) {
      using T = decltype(z);
      loss = ref::cross_entropy(logits.as<T>(), targets.data(), dlogits ? dlogits->as<T>() : nullptr, logits.rows(), logits.cols());
    });
    return loss;
  }
  void adamw_update(nn::tensor& p, const nn::tensor& g, nn::tensor& m, nn::tensor& v, const nn::adamw_hyper& h) override {
    nn::require_shape(g, p.rows(), p.cols(), "adamw gradient");
    nn::require_shape(m, p.rows(), p.cols(), "adamw first moment");
    nn::require_shape(v, p.rows(), p.cols(), "adamw second moment");
    dispatch(p.type(), [&](auto z) {
      using T = decltype(z);
      ref::adamw_update(p.as<T>(), g.as<T>(), m.as<T>(), v.as<T>(), p.size(), h);
    });
  }

  // ---- host views of quantized copies (tests and oracles)
  static const payload& get(const nn::qtensor& q) {
    const auto* p = dynamic_cast<const payload*>(q.payload());
    detail::require(p != nullptr, "host_backend: the quantized copy was not made by a host_backend");
    return *p;
  }
  static const mx_tensor& mx(const nn::qtensor& q) { return std::get<mx_tensor>(get(q).data); }
  static const fp8_tensor& fp8(const nn::qtensor& q) { return std::get<fp8_tensor>(get(q).data); }
  static const std::vector<bfloat16>& bf16(const nn::qtensor& q) { return std::get<std::vector<bfloat16>>(get(q).data); }

 private:
  template <class F>
  static void dispatch(nn::dtype t, F&& f) {
    if (t == nn::dtype::f32) f(float{});
    else f(double{});
  }
  static void same_type(const nn::tensor& a, const nn::tensor& b, const char* what) {
    detail::require(a.type() == b.type(), what, ": element types differ (", name_of(a.type()), ", ", name_of(b.type()), ")");
  }
  static void check_heads(const nn::head_shape& s) {
    detail::require(s.n_kv_heads > 0 && s.n_heads % s.n_kv_heads == 0, "attention: n_heads ", s.n_heads,
                    " is not a multiple of n_kv_heads ", s.n_kv_heads);
  }
  static bool same_options(const quantize_options& a, const quantize_options& b) noexcept {
    return a.rule == b.rule && a.round == b.round && a.hadamard == b.hadamard && a.random_signs == b.random_signs &&
           a.seed == b.seed && a.stream == b.stream;
  }
  static std::vector<float> to_float(const nn::tensor& t) {
    std::vector<float> out(t.size());
    const double* p = t.as<double>();
    for (std::size_t i = 0; i < out.size(); ++i) out[i] = static_cast<float>(p[i]);
    return out;
  }
  static std::vector<float> widen(const std::vector<bfloat16>& v) {
    std::vector<float> out(v.size());
    for (std::size_t i = 0; i < v.size(); ++i) out[i] = v[i].to_float();
    return out;
  }
  // The stored [lines, length] copy of a row-major [rows, cols] matrix (transposed when columnwise).
  template <class U, class T, class F>
  static std::vector<U> stored_copy(const T* x, std::size_t rows, std::size_t cols, block_axis axis, F&& convert) {
    std::vector<U> out(rows * cols);
    for (std::size_t r = 0; r < rows; ++r)
      for (std::size_t c = 0; c < cols; ++c)
        out[axis == block_axis::rowwise ? r * cols + c : c * rows + r] = convert(x[r * cols + c]);
    return out;
  }
  static std::size_t bytes_of(const payload& p) {
    return std::visit(
        [](const auto& d) -> std::size_t {
          using D = std::decay_t<decltype(d)>;
          if constexpr (std::is_same_v<D, mx_tensor>) return d.bytes();
          else if constexpr (std::is_same_v<D, fp8_tensor>) return d.data.size() + sizeof(float);  // codes + scale
          else return d.size() * sizeof(typename D::value_type);
        },
        p.data);
  }
  nn::qtensor finish(const nn::quant_request& r, std::size_t rows, std::size_t cols, float amax, std::shared_ptr<payload> p) {
    const std::size_t bytes = bytes_of(*p);
    p->tracked = nn::tracked_bytes(&memory_, r.tag, bytes);
    p->live = &live_[static_cast<std::size_t>(r.spec.kind)];
    ++*p->live;
    return nn::qtensor(r, rows, cols, amax, bytes, std::move(p));
  }
  void count(nn::operand_use u) noexcept { ++counters_.quantized[static_cast<std::size_t>(u)]; }

  std::array<std::size_t, 4> live_{};  // by precision
};

}  // namespace ref
MXKIT_END_NAMESPACE
