// SPDX-License-Identifier: Apache-2.0
#pragma once
// The host reference backend: every operation of nn/backend.hpp on the CPU, single-threaded and
// deterministic. Its "stream" is the calling thread (every operation has finished when it
// returns), its "device memory" is host memory from a pool that caches freed blocks by size
// (counters().driver_allocations counts the blocks it had to make). The public functions of
// nn::backend have checked every argument; the do_*() functions below check nothing again.
// Quantization is mxkit's host quantizer (ref/quantize.hpp, fp8_tensor.hpp), GEMMs are the named
// training products of ref/gemm.hpp (ref::product: fprop, dgrad, wgrad, which check that each MX
// copy has the right block axis), with alpha/beta:
//   mx      quantize / quantize_both, ref::product on the MX copies; an NVFP4 operand the same
//           through ref/nvfp4_quantize.hpp (each copy's tensor scale from its own amax) and
//           ref/nvfp4_gemm.hpp
//   fp8     quantize_fp8 with the scale read from the request's scaling-table row (+ transpose
//           for the columnwise copy), amax max-combined into the row's history column 0;
//           ref::product on fp8 views
//   bf16    values rounded to bfloat16 (RNE) and stored as bfloat16; the GEMM widens both
//           operands to float once and runs ref::product on the float views, which gives
//           the same bits as on bfloat16 views (same floats, same order; tested) at float speed
//   native  the tensor's own values (f32 or bf16: ref::product on floats; f64: a double loop,
//           gradient check)
// Layer kernels are the ref:: functions of ref/nn/ (rmsnorm.hpp, attention.hpp, ...). bf16
// activations are widened to float, computed by the float kernel and rounded back (RNE) on
// store, as a device kernel loads bf16, computes in fp32 and stores bf16. The producers
// (rmsnorm_quantize, swiglu_quantize, swiglu_backward_quantize) are nn::backend's unfused
// defaults: the kernel into a temporary, then its output quantized (the same bytes by
// construction). gemm with a C operand copies C into D first. Beside nn::backend it implements
// full sharding's copy gather (parallel/copy_gather.hpp): copies packed and assembled as bytes.
// The element-type plumbing between tensors and the kernels is host/host_staging.hpp's.
// Not final: tests derive from it to record what the layers ask for.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include <mxkit/checked_arithmetic.hpp>
#include <mxkit/error.hpp>
#include <mxkit/format/float16.hpp>
#include <mxkit/host/host_staging.hpp>
#include <mxkit/nn/backend.hpp>
#include <mxkit/parallel/copy_gather.hpp>
#include <mxkit/ref/gemm.hpp>
#include <mxkit/ref/nn/adamw.hpp>
#include <mxkit/ref/nn/attention.hpp>
#include <mxkit/ref/nn/cross_entropy.hpp>
#include <mxkit/ref/nn/delayed_scaling.hpp>
#include <mxkit/ref/nn/embedding.hpp>
#include <mxkit/ref/nn/rmsnorm.hpp>
#include <mxkit/ref/nn/rope.hpp>
#include <mxkit/ref/nn/swiglu.hpp>
#include <mxkit/ref/nvfp4_gemm.hpp>
#include <mxkit/ref/nvfp4_quantize.hpp>
#include <mxkit/ref/quantize.hpp>
#include <mxkit/tensor/fp8_tensor.hpp>

MXKIT_BEGIN_NAMESPACE
namespace ref {

class host_backend : public nn::backend, public nn::copy_gather, private host_staging {
 public:
  // Storage of one quantized copy in host memory.
  struct payload final : nn::qpayload {
    std::variant<mx_tensor, nvfp4_tensor, fp8_tensor, std::vector<bfloat16>, std::vector<float>, std::vector<double>> data;
    nn::tracked_bytes tracked;
    std::size_t* live = nullptr;  // the backend's count of live copies of this kind
    payload() = default;
    payload(const payload&) = delete;
    payload& operator=(const payload&) = delete;
    ~payload() override {
      if (live) --*live;
    }
  };

  host_backend() : pool_(std::make_shared<pool>()) {}

  // Quantized copies of kind p alive right now (anywhere: caches, saved operands, callers).
  std::size_t live_copies(nn::precision p) const noexcept { return live_[static_cast<std::size_t>(p)]; }
  // Bytes the pool holds in free blocks (released tensors, ready for reuse).
  std::size_t pooled_bytes() const noexcept { return pool_->free_bytes; }

  const char* name() const noexcept override { return "host"; }
  nn::copy_gather* copy_gatherer() noexcept override { return this; }

  // ---- host views of quantized copies (tests and oracles)
  static const payload& get(const nn::qtensor& q) {
    const auto* p = dynamic_cast<const payload*>(q.payload());
    detail::require(p != nullptr, "host_backend: the quantized copy was not made by a host_backend");
    return *p;
  }
  static const mx_tensor& mx(const nn::qtensor& q) { return std::get<mx_tensor>(get(q).data); }
  static const nvfp4_tensor& nvfp4(const nn::qtensor& q) { return std::get<nvfp4_tensor>(get(q).data); }
  static const fp8_tensor& fp8(const nn::qtensor& q) { return std::get<fp8_tensor>(get(q).data); }
  static const std::vector<bfloat16>& bf16(const nn::qtensor& q) { return std::get<std::vector<bfloat16>>(get(q).data); }

 protected:
  // ---- memory: a pool of 8-byte aligned blocks, cached by size
  // Uninitialized memory is filled with 0xFF bytes (NaN in every float type): an operation that
  // leaves part of an output it should overwrite unwritten shows up as NaN in the tests.
  allocation do_alloc(std::size_t bytes, bool zero_fill) override {
    const std::size_t words = (bytes + 7) / 8;
    std::unique_ptr<double[]> block;
    auto& free = pool_->free[words];
    if (!free.empty()) {
      block = std::move(free.back());
      free.pop_back();
      pool_->free_bytes -= words * 8;
    } else {
      block.reset(new double[words]);
      ++counters_.driver_allocations;
    }
    std::memset(block.get(), zero_fill ? 0 : 0xFF, words * 8);
    double* data = block.release();
    std::shared_ptr<void> owner(data, [p = pool_, words](void* d) {
      p->free[words].emplace_back(static_cast<double*>(d));
      p->free_bytes += words * 8;
    });
    return {data, std::move(owner)};
  }
  void do_write(nn::tensor& t, const std::vector<double>& values) override {
    visit(t, [&](auto* p) {
      for (std::size_t i = 0; i < values.size(); ++i) p[i] = nn::element_from_double<std::remove_pointer_t<decltype(p)>>(values[i]);
    });
  }
  void do_write_tokens(nn::tensor& t, const std::vector<std::int32_t>& tokens) override {
    if (!tokens.empty()) std::memcpy(t.data(), tokens.data(), tokens.size() * sizeof(std::int32_t));
  }
  std::vector<double> do_read(const nn::tensor& t) const override {
    std::vector<double> out(t.size());
    visit(t, [&](const auto* p) {
      for (std::size_t i = 0; i < out.size(); ++i) out[i] = nn::element_to_double(p[i]);
    });
    return out;
  }
  void do_synchronize() override {}  // in order by construction
  void do_fill(nn::tensor& t, double value) override {
    visit(t, [&](auto* p) {
      const auto v = nn::element_from_double<std::remove_pointer_t<decltype(p)>>(value);
      for (std::size_t i = 0; i < t.size(); ++i) p[i] = v;
    });
  }
  void do_copy(const nn::tensor& src, nn::tensor& dst) override {
    if (src.type() == dst.type()) {
      if (src.bytes()) std::memcpy(dst.data(), src.data(), src.bytes());
      return;
    }
    visit(src, [&](const auto* s) {  // floating types (backend::copy): through double, exact, then rounded once to dst's type
      visit(dst, [&](auto* d) {
        for (std::size_t i = 0; i < src.size(); ++i) d[i] = nn::element_from_double<std::remove_pointer_t<decltype(d)>>(nn::element_to_double(s[i]));
      });
    });
  }
  void do_axpy(double alpha, const nn::tensor& x, nn::tensor& y) override {
    compute(x.type(), [&](auto z) {
      using T = decltype(z);
      staging<T> st;
      const T* s = st.in(x);
      T* d = st.out(y, true);
      const T a = static_cast<T>(alpha);
      for (std::size_t i = 0; i < x.size(); ++i) d[i] += a * s[i];
      st.commit();
    });
  }
  void do_copy_amax(const nn::tensor& x, const nn::quant_request& r, nn::tensor& out) override {
    const floats xf(x);
    const block_layout l{r.spec.block_scaled().format, r.axis, x.rows(), x.cols()};
    *out.as<float>() = detail::nvfp4_copy_amax(matrix_view<const float>{xf.data(), x.rows(), x.cols()}, l, r.nvfp4_quantize_options(), false, 0);
  }
  void do_amax(const nn::tensor& x, nn::tensor& out) override {
    double m = 0.0;
    visit(x, [&](const auto* p) {
      for (std::size_t i = 0; i < x.size(); ++i) {
        const double a = std::fabs(nn::element_to_double(p[i]));
        if (std::isnan(a) || a > m) m = a;
        if (std::isnan(m)) break;
      }
    });
    *out.as<double>() = m;
  }

  // ---- quantized operands
  nn::qtensor do_quantize(const nn::tensor& x, const nn::quant_request& r) override {
    auto p = std::make_shared<payload>();
    r.spec.visit(nn::overloaded{
        [&](nn::native_spec) {
          if (x.type() == nn::dtype::f64) p->data = stored_copy<double>(x.as<double>(), x.rows(), x.cols(), r.axis, [](double v) { return v; });
          else {
            const floats xf(x);
            p->data = stored_copy<float>(xf.data(), x.rows(), x.cols(), r.axis, [](float v) { return v; });
          }
        },
        [&](nn::bf16_spec) {
          const floats xf(x);
          p->data = stored_copy<bfloat16>(xf.data(), x.rows(), x.cols(), r.axis,
                                          [](float v) { return bfloat16::from_float(v, rounding::nearest_even, overflow::propagate); });
        },
        [&](const nn::fp8_spec& s) {
          const floats xf(x);
          fp8_tensor f = quantize_fp8(matrix_view<const float>{xf.data(), x.rows(), x.cols()}, s.type, scale_of(r.fp8));
          if (r.fp8.record_amax) record(r.fp8, f.amax);
          p->data = r.axis == block_axis::rowwise ? std::move(f) : mxkit::transpose(f);
        },
        [&](const nn::block_scaled_spec& s) {
          const floats xf(x);
          const matrix_view<const float> v{xf.data(), x.rows(), x.cols()};
          if (s.is_nvfp4()) p->data = ref::quantize(v, s.format, r.axis, r.nvfp4_quantize_options(), given_tensor_scale(r));
          else p->data = ref::quantize(v, s.mx(), r.axis, r.mx_options());
        },
    });
    return finish(r, x.rows(), x.cols(), std::move(p));
  }

  nn::qpair do_quantize_both(const nn::tensor& x, const nn::quant_request& row, const nn::quant_request& col) override {
    const bool same_mx = row.spec.is<nn::block_scaled_spec>() && row.spec == col.spec && row.block == col.block &&
                         row.tensor_amax.same_as(col.tensor_amax);
    if (same_mx) {  // one call of mxkit::quantize_both, as the fused kernel would produce them
      const floats xf(x);
      const matrix_view<const float> v{xf.data(), x.rows(), x.cols()};
      const nn::block_scaled_spec& s = row.spec.block_scaled();
      auto pr = std::make_shared<payload>(), pc = std::make_shared<payload>();
      if (s.is_nvfp4()) {  // each copy with the tensor scale of its own amax, as gpu::quantize_nvfp4_both
        ref::nvfp4_tensor_pair both = ref::quantize_both(v, s.format, row.nvfp4_quantize_options(), given_tensor_scale(row));
        pr->data = std::move(both.rowwise);
        pc->data = std::move(both.columnwise);
      } else {
        mx_tensor_pair both = ref::quantize_both(v, s.mx(), row.mx_options());
        pr->data = std::move(both.rowwise);
        pc->data = std::move(both.columnwise);
      }
      return {finish(row, x.rows(), x.cols(), std::move(pr)), finish(col, x.rows(), x.cols(), std::move(pc))};
    }
    const bool same_fp8 = row.spec.is<nn::fp8_spec>() && row.spec == col.spec && row.fp8.table == col.fp8.table && row.fp8.row == col.fp8.row;
    if (same_fp8) {  // one cast, one transpose (per-tensor scale)
      nn::quant_request r = row;
      r.fp8.record_amax = row.fp8.record_amax || col.fp8.record_amax;
      nn::qtensor q = host_backend::do_quantize(x, r);
      auto p = std::make_shared<payload>();
      p->data = mxkit::transpose(fp8(q));
      return {std::move(q), finish(col, x.rows(), x.cols(), std::move(p))};
    }
    return {host_backend::do_quantize(x, row), host_backend::do_quantize(x, col)};
  }

  nn::qtensor do_transpose(const nn::qtensor& q, nn::operand_use use, nn::mem_tag tag) override {
    auto p = std::make_shared<payload>();
    if (q.kind() == nn::precision::bf16)
      p->data = stored_copy<bfloat16>(bf16(q).data(), q.rows(), q.cols(), block_axis::columnwise, [](bfloat16 v) { return v; });
    else
      p->data = mxkit::transpose(fp8(q));
    nn::quant_request r = q.request();
    r.axis = block_axis::columnwise;
    r.use = use;
    r.tag = tag;
    r.fp8.record_amax = false;
    return finish(r, q.rows(), q.cols(), std::move(p));
  }

  nn::host_fp8 do_export_fp8(const nn::tensor& w, fp8_type type, float scale) override {
    const floats wf(w);
    const fp8_tensor f = quantize_fp8(matrix_view<const float>{wf.data(), w.rows(), w.cols()}, type, scale);
    std::shared_ptr<std::uint8_t[]> codes = alloc_host(f.data.size());
    if (!f.data.empty()) std::memcpy(codes.get(), f.data.data(), f.data.size());
    return nn::host_fp8(type, f.rows, f.cols, f.scale, f.amax, std::move(codes));
  }
  nn::qtensor do_import_fp8(const nn::host_fp8& host, nn::operand_use use, nn::mem_tag tag) override {
    nn::quant_request r;
    r.spec = nn::recipes::mma_operand(host.type());
    r.axis = block_axis::rowwise;
    r.use = use;
    r.tag = tag;
    auto p = std::make_shared<payload>();
    p->data = host.to_tensor();
    return finish(r, host.rows(), host.cols(), std::move(p));
  }

  // ---- copies gathered from the ranks' slabs (parallel/copy_gather.hpp's wire format)
  static_assert(sizeof(bfloat16) == copy_element_bytes(nn::precision::bf16) && std::is_trivially_copyable_v<bfloat16>,
                "a bf16 copy's values travel as their bytes");
  bool do_gathers_copies() const noexcept override { return true; }
  void do_pack_copy(const nn::qtensor& q, nn::tensor& wire, std::size_t byte_offset) override {
    std::uint8_t* out = static_cast<std::uint8_t*>(wire.data()) + byte_offset;
    if (columnwise_is_transpose(q.kind())) {  // FP8, bf16 (rowwise): the elements as stored
      const void* elements = q.kind() == nn::precision::fp8 ? static_cast<const void*>(fp8(q).data.data()) : bf16(q).data();
      const std::size_t n = copy_wire_bytes(q.request(), q.rows(), q.cols());
      if (n) std::memcpy(out, elements, n);
      return;
    }
    if (q.request().spec.block_scaled().is_nvfp4()) {  // codes, E4M3 scales, the tensor scale
      const nvfp4_tensor& t = nvfp4(q);
      const float scale = t.tensor_scale();
      std::memcpy(out, t.data().data(), t.data().size());
      std::memcpy(out + t.data().size(), t.scales().data(), t.scales().size());
      std::memcpy(out + t.data().size() + t.scales().size(), &scale, sizeof scale);
      return;
    }
    const mx_tensor& m = mx(q);
    std::memcpy(out, m.data().data(), m.data().size());
    std::memcpy(out + m.data().size(), m.scales().data(), m.scales().size());
  }
  nn::qtensor do_assemble_copy(const nn::quant_request& r, std::size_t rows, std::size_t cols, const nn::tensor& wire,
                               std::span<const nn::copy_slab> slabs) override {
    const std::uint8_t* in = static_cast<const std::uint8_t*>(wire.data());
    auto p = std::make_shared<payload>();
    if (columnwise_is_transpose(r.spec.kind())) {  // FP8, bf16 (rowwise): the slabs' elements one after another
      const std::size_t row_bytes = copy_wire_bytes(r, 1, cols);
      const auto place = [&](void* elements) {
        for (const nn::copy_slab& s : slabs)
          std::memcpy(static_cast<std::uint8_t*>(elements) + s.first_row * row_bytes, in + s.byte_offset, s.rows * row_bytes);
      };
      if (r.spec.kind() == nn::precision::bf16) {
        std::vector<bfloat16> values(rows * cols);
        place(values.data());
        p->data = std::move(values);
      } else {
        std::vector<std::uint8_t> codes(rows * cols);
        place(codes.data());
        p->data = fp8_tensor{r.spec.fp8().type, rows, cols, scale_of(r.fp8), 0.0f, std::move(codes)};  // (the amax is the table's)
      }
      return finish(r, rows, cols, std::move(p));
    }
    const nn::block_scaled_spec& spec = r.spec.block_scaled();
    const block_layout L{spec.format, r.axis, rows, cols};
    std::vector<std::uint8_t> data(L.data_bytes()), scales(L.scale_count());
    float tensor_scale = 0.0f;  // NVFP4: the slabs' one tensor scale, the whole tensor's
    for (const nn::copy_slab& s : slabs) {
      const block_layout P{spec.format, r.axis, s.rows, cols};
      if (spec.is_nvfp4()) {
        float t;
        std::memcpy(&t, in + s.byte_offset + P.data_bytes() + P.scale_count(), sizeof t);
        detail::require(&s == slabs.data() || bit_cast<std::uint32_t>(t) == bit_cast<std::uint32_t>(tensor_scale),
                        "assemble_copy: the slab at row ", s.first_row, " has tensor scale ", t, " where the first has ", tensor_scale,
                        " (every slab is quantized with the whole tensor's amax, quant_request::tensor_amax)");
        tensor_scale = t;
      }
      const std::uint8_t* codes = in + s.byte_offset;
      const std::uint8_t* slab_scales = codes + P.data_bytes();
      if (r.axis == block_axis::rowwise) {  // lines are rows: the slab's lines in place
        std::memcpy(data.data() + s.first_row * L.line_bytes(), codes, P.data_bytes());
        std::memcpy(scales.data() + s.first_row * L.blocks_per_line(), slab_scales, P.scale_count());
      } else {  // lines are columns: the slab holds positions [first_row, first_row + rows) of every line
        const std::size_t at = packed_bytes(s.first_row, L.storage_bits());
        for (std::size_t c = 0; c < cols; ++c) {
          std::memcpy(data.data() + c * L.line_bytes() + at, codes + c * P.line_bytes(), P.line_bytes());
          std::memcpy(scales.data() + c * L.blocks_per_line() + s.first_row / L.block_size(), slab_scales + c * P.blocks_per_line(),
                      P.blocks_per_line());
        }
      }
    }
    if (spec.is_nvfp4()) {  // (the constructor refuses a tensor scale that is not a valid one)
      nvfp4_tensor out(L, r.nvfp4_quantize_options(), tensor_scale, true);
      std::copy(data.begin(), data.end(), out.data().begin());
      std::copy(scales.begin(), scales.end(), out.scales().begin());
      p->data = std::move(out);
    } else {
      mx_tensor out(L, r.mx_options());
      out.set_data(std::move(data));
      out.set_scales(std::move(scales));
      p->data = std::move(out);
    }
    return finish(r, rows, cols, std::move(p));
  }

  void do_update_scales(nn::scaling_table& t) override {
    ref::update_scales(t.history().as<float>(), t.scale().as<float>(), t.fp8_max().as<float>(), t.rows(), t.config().history_length,
                       t.config());
  }

  void do_gemm(gemm_product kind, const nn::qtensor& a, const nn::qtensor& b, nn::tensor& d, float alpha, float beta,
               const nn::tensor* c) override {
    if (c && beta != 0.0f) host_backend::do_copy(*c, d);  // the epilogue's C, read from D
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
    // fp32 accumulation into d directly (f32 or bf16 d), or via a temporary for an f64 d
    // (gradient-check models).
    if (d.type() == nn::dtype::bf16) {
      product(kind, a, b, matrix_view<bfloat16>{d.as<bfloat16>(), P, Q}, gemm_epilogue{alpha, beta});
      return;
    }
    std::vector<float> tmp;
    const gemm_epilogue e = d.type() == nn::dtype::f32 ? gemm_epilogue{alpha, beta} : gemm_epilogue{};
    if (d.type() == nn::dtype::f64) tmp.assign(P * Q, 0.0f);
    product(kind, a, b, matrix_view<float>{d.type() == nn::dtype::f32 ? d.as<float>() : tmp.data(), P, Q}, e);
    if (d.type() == nn::dtype::f64) {
      double* dd = d.as<double>();
      for (std::size_t i = 0; i < P * Q; ++i) dd[i] = beta == 0.0f ? double{alpha} * tmp[i] : double{alpha} * tmp[i] + double{beta} * dd[i];
    }
  }

  // ---- layer kernels
  void do_rmsnorm_forward(const nn::tensor& x, const nn::tensor& w, nn::tensor& y, nn::tensor& rstd, double eps) override {
    compute(x.type(), [&](auto z) {
      using T = decltype(z);
      staging<T> st;
      ref::rmsnorm_forward(st.in(x), st.in(w), st.out(y, false), st.out(rstd, false), x.rows(), x.cols(), eps);
      st.commit();
    });
  }
  void do_rmsnorm_backward(const nn::tensor& dy, const nn::tensor& x, const nn::tensor& w, const nn::tensor& rstd, const nn::tensor& dr,
                           nn::tensor& dx, nn::tensor* dw) override {
    if (!dr.same_as(dx)) std::memcpy(dx.data(), dr.data(), dx.bytes());  // then accumulate: the same values as one pass
    compute(x.type(), [&](auto z) {
      using T = decltype(z);
      staging<T> st;
      ref::rmsnorm_backward(st.in(dy), st.in(x), st.in(w), st.in(rstd), st.out(dx, true), dw ? st.out(*dw, true) : nullptr, x.rows(),
                            x.cols());
      st.commit();
    });
  }
  void do_rope(nn::tensor& qkv, const nn::head_shape& s, const nn::rope_frequencies& f, bool inverse) override {
    compute(qkv.type(), [&](auto z) {
      using T = decltype(z);
      staging<T> st;
      ref::rope(st.out(qkv, true), s, f, inverse);
      st.commit();
    });
  }
  void do_attention_forward(const nn::tensor& qkv, nn::tensor& out, nn::tensor& lse, const nn::head_shape& s) override {
    compute(qkv.type(), [&](auto z) {
      using T = decltype(z);
      staging<T> st;
      ref::attention_forward(st.in(qkv), st.out(out, false), st.out(lse, false), s);
      st.commit();
    });
  }
  void do_attention_backward(const nn::tensor& dout, const nn::tensor& qkv, const nn::tensor& out, const nn::tensor& lse,
                             nn::tensor& dqkv, const nn::head_shape& s) override {
    compute(qkv.type(), [&](auto z) {
      using T = decltype(z);
      staging<T> st;
      ref::attention_backward(st.in(dout), st.in(qkv), st.in(out), st.in(lse), st.out(dqkv, false), s);
      st.commit();
    });
  }
  void do_swiglu_forward(const nn::tensor& gu, nn::tensor& out) override {
    compute(gu.type(), [&](auto z) {
      using T = decltype(z);
      staging<T> st;
      ref::swiglu_forward(st.in(gu), st.out(out, false), gu.rows(), gu.cols() / 2);
      st.commit();
    });
  }
  void do_swiglu_backward(const nn::tensor& dout, const nn::tensor& gu, nn::tensor& dgu) override {
    compute(gu.type(), [&](auto z) {
      using T = decltype(z);
      staging<T> st;
      ref::swiglu_backward(st.in(dout), st.in(gu), st.out(dgu, false), gu.rows(), gu.cols() / 2);
      st.commit();
    });
  }
  void do_embedding_forward(const nn::tensor& tokens, const nn::tensor& table, nn::tensor& out) override {
    compute(out.type(), [&](auto z) {
      using T = decltype(z);
      staging<T> st;
      ref::embedding_forward(tokens.as<std::int32_t>(), tokens.rows(), st.in(table), st.out(out, false), table.cols());
      st.commit();
    });
  }
  void do_embedding_backward(const nn::tensor& tokens, const nn::tensor& dout, nn::tensor& dtable) override {
    compute(dout.type(), [&](auto z) {
      using T = decltype(z);
      staging<T> st;
      ref::embedding_backward(tokens.as<std::int32_t>(), tokens.rows(), st.in(dout), st.out(dtable, true), dtable.cols());
      st.commit();
    });
  }
  void do_cross_entropy(nn::tensor& logits, const nn::tensor& targets, const nn::tensor* mask, std::size_t first, nn::tensor* row_loss,
                        nn::tensor* loss, bool gradient) override {
    const std::int32_t* m = mask ? mask->as<std::int32_t>() : nullptr;
    const double N = ref::cross_entropy_count(m, targets.rows());
    compute(logits.type(), [&](auto z) {
      using T = decltype(z);
      staging<T> st;
      T* l = st.out(logits, true);
      ref::cross_entropy_rows(l, targets.as<std::int32_t>(), m, first, logits.rows(), logits.cols(), N, gradient ? l : nullptr,
                              row_loss ? row_loss->as<double>() : nullptr);
      if (gradient) st.commit();
    });
    if (loss) *loss->as<double>() = ref::cross_entropy_mean(row_loss->as<double>(), targets.rows(), N);
  }

  // ---- optimizer
  void do_global_norm(std::span<const nn::tensor* const> tensors, double max_norm, nn::tensor& norm, nn::tensor& clip) override {
    double ss = 0.0;
    for (const nn::tensor* t : tensors)
      compute(t->type(), [&](auto z) {
        using T = decltype(z);
        staging<T> st;
        ss += ref::sum_squares(st.in(*t), t->size());
      });
    const double n = std::sqrt(ss);
    *norm.as<double>() = n;
    *clip.as<double>() = nn::clip_factor(n, max_norm);
  }
  void do_adamw_step(std::span<const nn::adamw_slot_ref> slots, const nn::adamw_args& args, const nn::tensor& norm,
                     const nn::tensor& clip, nn::tensor& state) override {
    double* st = state.as<double>();
    if (!std::isfinite(*norm.as<double>())) {
      st[1] += 1.0;
      return;
    }
    const std::uint64_t step = static_cast<std::uint64_t>(st[0]) + 1;
    const double lr = args.lr_device ? *args.lr_device->as<double>() : args.lr;
    for (const nn::adamw_slot_ref& s : slots) {
      const nn::adamw_hyper h{lr, args.beta1, args.beta2, args.eps, s.weight_decay, *clip.as<double>(), step};
      compute(s.param->type(), [&](auto z) {
        using T = decltype(z);
        ref::adamw_update(s.param->as<T>(), s.grad->as<T>(), s.m->as<T>(), s.v->as<T>(), s.param->size(), h);
      });
    }
    st[0] = static_cast<double>(step);
  }

 private:
  struct pool {
    std::map<std::size_t, std::vector<std::unique_ptr<double[]>>> free;  // by size in 8-byte words
    std::size_t free_bytes = 0;
  };

  static float scale_of(const nn::fp8_scaling_slot& s) { return s.table->scale().as<float>()[s.row]; }
  // An NVFP4 request's tensor scale when it gives the amax to compute it from (a whole tensor's).
  static std::optional<float> given_tensor_scale(const nn::quant_request& r) {
    if (!r.tensor_amax.defined()) return std::nullopt;
    return nvfp4_tensor_scale(*r.tensor_amax.as<float>());
  }
  static void record(const nn::fp8_scaling_slot& s, float amax) {
    nn::record_amax(s.table->history().as<float>()[s.row * s.table->config().history_length], amax);
  }
  template <class Out>
  static void product(gemm_product kind, const nn::qtensor& a, const nn::qtensor& b, const matrix_view<Out>& D, const gemm_epilogue& e) {
    const std::size_t P = a.lines(), Q = b.lines(), R = a.length();
    (void)Q;
    a.request().spec.visit(nn::overloaded{
        [&](const nn::block_scaled_spec& s) {
          if (s.is_nvfp4()) ref::product(kind, nvfp4(a).view(), nvfp4(b).view(), D, e);  // ref/nvfp4_gemm.hpp
          else ref::product(kind, mx(a).view(), mx(b).view(), D, e);
        },
        [&](const nn::fp8_spec&) { ref::product(kind, as_view(fp8(a)), as_view(fp8(b)), D, e); },
        [&](nn::bf16_spec) {
          const std::vector<float> A = widen(bf16(a)), B = widen(bf16(b));
          ref::product(kind, matrix_view<const float>{A.data(), P, R}, matrix_view<const float>{B.data(), b.lines(), R}, D, e);
        },
        [&](nn::native_spec) {
          const auto& A = std::get<std::vector<float>>(get(a).data);
          const auto& B = std::get<std::vector<float>>(get(b).data);
          ref::product(kind, matrix_view<const float>{A.data(), P, R}, matrix_view<const float>{B.data(), b.lines(), R}, D, e);
        },
    });
  }
  static std::size_t bytes_of(const payload& p) {
    return std::visit(
        [](const auto& d) -> std::size_t {
          using D = std::decay_t<decltype(d)>;
          if constexpr (std::is_same_v<D, mx_tensor> || std::is_same_v<D, nvfp4_tensor>) return d.bytes();  // nvfp4: + the tensor scale
          else if constexpr (std::is_same_v<D, fp8_tensor>) return d.data.size() + sizeof(float);  // codes + scale
          else return d.size() * sizeof(typename D::value_type);
        },
        p.data);
  }
  nn::qtensor finish(const nn::quant_request& r, std::size_t rows, std::size_t cols, std::shared_ptr<payload> p) {
    const std::size_t bytes = bytes_of(*p);
    p->tracked = nn::tracked_bytes(&memory_, r.tag, bytes);
    p->live = &live_[static_cast<std::size_t>(r.spec.kind())];
    ++*p->live;
    return nn::qtensor(r, rows, cols, bytes, std::move(p));
  }

  std::shared_ptr<pool> pool_;
  std::array<std::size_t, 4> live_{};  // by precision
};

}  // namespace ref
MXKIT_END_NAMESPACE
