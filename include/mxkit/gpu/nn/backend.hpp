// SPDX-License-Identifier: Apache-2.0
#pragma once
// The device training backend: every operation of nn/backend.hpp on one GPU, enqueued on the
// backend's own stream, so the same layers, model, recipes, LoRA and healing code that runs on
// ref::host_backend trains here. One source for CUDA and HIP (gpu/platform.hpp).
//
// What runs where
//   memory     mxkit's stream-ordered pool (gpu/memory.hpp): alloc() zero-fills on the stream,
//              a dropped tensor returns its memory in stream order; counters().driver_allocations
//              counts the allocations that grew the pool (its reserved bytes), so a steady-state
//              step shows 0. Uploads go through page-locked staging memory; reads wait.
//   operands   MX: gpu::quantize (both copies from one read when both are asked for); NVFP4:
//              gpu::quantize_nvfp4 (each copy's tensor scale from its amax, left in device
//              memory for the GEMM's epilogue); FP8:
//              gpu::cast_fp8_delayed, reading the scaling table's scale on the device and
//              max-combining the amax into the table's history, the scale it used kept with the
//              copy; bf16: a conversion (rowwise) or a converting transpose (columnwise). A bf16
//              columnwise copy is no copy at all where the GEMM can read the rows MN-major
//              (gpu::major_order): the rowwise copy made with it (or given to transpose(): a
//              weight's copy assembled by full sharding), or x itself when the request allows
//              (may_alias_input: wgrad's X and dY, and a bf16 master weight, which is then its
//              own fprop and dgrad copy).
//   GEMM       gpu/gemm (the sm90 path on Hopper, gfx950's MX path on CDNA4, else portable;
//              NVFP4 through gpu/gemm/nvfp4.hpp's exact bf16 expansion),
//              the FP8 descale read from the copies' device scales; C in the epilogue.
//   layers     gpu/nn/ kernels: rmsnorm, rope (from a factor table kept across calls), flash
//              attention (bf16 tensor cores: f32 activations are rounded to bf16 for attention,
//              its output widened back), swiglu, embedding, cross_entropy; global_norm and adamw
//              as multi-tensor kernels whose device descriptor arrays are kept between steps.
//   scalars    loss, norm, clip factor and step counts stay in device memory; one-thread
//              kernels move them between the kernels' layouts (gpu/nn/device_scalars.hpp).
// Producers: swiglu_quantize writes its FP8 copies straight from gate/up (gpu::swiglu_forward_fp8:
// the output is never stored); its other copies, rmsnorm_quantize's and
// swiglu_backward_quantize's are nn::backend's unfused defaults: the kernel, then its output
// quantized (docs/perf/training.md has what fusing them measured). swiglu_backward_quantize's
// default releases dout behind the kernel, so its memory serves the copies. The embedding and
// cross-entropy kernels' range flags are never raised: write_tokens checks every id on the host
// before the upload.
// The healing stash: export_fp8 casts on the device and copies the codes to the host;
// import_fp8 uploads on a second stream (the copy engine) ordered after the backend's stream, so
// the MXFP4 copies freed before it are reused.
// Beside nn::backend it implements full sharding's copy gather (parallel/copy_gather.hpp): copies
// packed into and assembled from device wire buffers by stream-ordered copies.
// Not here: native (unrounded) operands and f64 models (the gradient check): the host backend's.
// AMD: compiled for gfx942 and gfx950, never run (no AMD GPU was available to this project).
// This header: the members that launch kernels. Beside it: gpu/nn/backend_class.hpp (the class,
// declared: what the kernel library's users compile against), gpu/nn/operand_payload.hpp (the
// copies' device storage and its counting), gpu/nn/host_transfers.hpp (staging ring, page-locked
// stash memory, uploads in flight), gpu/nn/backend_adapters.hpp (element types, the GEMM's operands, multi-tensor descriptors).
#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <span>
#include <vector>

#include <mxkit/gpu/platform.hpp>  // first: the vendor runtime before any MXKIT_HD code
#include <mxkit/error.hpp>
#include <mxkit/format/float16.hpp>
#include <mxkit/gpu/fp8_cast.hpp>
#include <mxkit/gpu/memory.hpp>
#include <mxkit/gpu/nn/adamw.hpp>
#include <mxkit/gpu/nn/attention.hpp>
#include <mxkit/gpu/nn/backend_adapters.hpp>
#include <mxkit/gpu/nn/backend_class.hpp>
#include <mxkit/gpu/nn/cross_entropy.hpp>
#include <mxkit/gpu/nn/delayed_scaling.hpp>
#include <mxkit/gpu/nn/device_scalars.hpp>
#include <mxkit/gpu/nn/embedding.hpp>
#include <mxkit/gpu/nn/global_norm.hpp>
#include <mxkit/gpu/nn/host_transfers.hpp>
#include <mxkit/gpu/nn/operand_payload.hpp>
#include <mxkit/gpu/nn/rmsnorm.hpp>
#include <mxkit/gpu/nn/rope.hpp>
#include <mxkit/gpu/nn/swiglu.hpp>
#include <mxkit/gpu/nn/tensor_ops.hpp>
#include <mxkit/gpu/quantize.hpp>
#include <mxkit/gpu/runtime.hpp>
#include <mxkit/nn/backend.hpp>
#include <mxkit/parallel/copy_gather.hpp>
#include <mxkit/tensor/fp8_tensor.hpp>
#include <mxkit/tensor/mx_tensor.hpp>

MXKIT_BEGIN_NAMESPACE
namespace gpu {

// The members that launch kernels, out of the class: inline here for header-only use; with the
// kernel library (gpu/kernel_library.hpp) compiled once, in it, and only declared to its users
// (the destructor, the first virtual member defined out of the class, places the vtable there).
#if !defined(MXKIT_GPU_LIBRARY_HAS_DEVICE_BACKEND) || defined(MXKIT_GPU_LIBRARY_DEFINES_DEVICE_BACKEND)
#if defined(MXKIT_GPU_LIBRARY_DEFINES_DEVICE_BACKEND)
#define MXKIT_GPU_DEVICE_BACKEND_ENTRY  // the kernel library's one definition
#else
#define MXKIT_GPU_DEVICE_BACKEND_ENTRY inline
#endif
MXKIT_GPU_DEVICE_BACKEND_ENTRY device_backend::device_backend() {
  MXKIT_GPU_CHECK(stream_create(&stream_));
  MXKIT_GPU_CHECK(stream_create(&copy_stream_));
  MXKIT_GPU_CHECK(event_create_timing_off(&order_));
  payloads_ = payload_factory(stream_, memory_, counters_.driver_allocations, live_);
  flags_ = alloc(1, 4, nn::dtype::i32, nn::mem_tag::activation);  // [embedding error, cross-entropy error, lr bits, spare]
  scratch_ = alloc(1, 8, nn::dtype::f64, nn::mem_tag::optimizer);  // zeros: the slots above
}
MXKIT_GPU_DEVICE_BACKEND_ENTRY device_backend::~device_backend() {
  (void)stream_synchronize(stream_);
  (void)stream_synchronize(copy_stream_);
  in_flight_.release_finished();
  flags_.reset();
  scratch_.reset();
  rope_table_.reset();  // freed on stream_, which goes below
  norm_list_ = {};
  adamw_list_ = {};
  (void)stream_synchronize(stream_);
  staging_.release();
  (void)event_destroy(order_);
  (void)stream_destroy(copy_stream_);
  (void)stream_destroy(stream_);
}
MXKIT_GPU_DEVICE_BACKEND_ENTRY device_backend::allocation device_backend::do_alloc(std::size_t bytes, bool zero_fill) {
  void* p = pool_alloc(bytes < 16 ? 16 : bytes);
  if (zero_fill) MXKIT_GPU_CHECK(memset_async(p, 0, bytes < 16 ? 16 : bytes, stream_));
  return {p, std::shared_ptr<void>(p, [s = stream_](void* d) { deallocate_async(d, s); })};
}
MXKIT_GPU_DEVICE_BACKEND_ENTRY void device_backend::do_write(nn::tensor& t, const std::vector<double>& values) {
  std::vector<std::uint8_t> host(t.bytes());
  nn::visit_dtype(t.type(), [&](auto z) {
    using T = decltype(z);
    for (std::size_t i = 0; i < values.size(); ++i) {
      const T v = nn::element_from_double<T>(values[i]);
      std::memcpy(host.data() + i * sizeof(T), &v, sizeof(T));
    }
  });
  staging_.upload(t.data(), host.data(), host.size(), stream_);
}
MXKIT_GPU_DEVICE_BACKEND_ENTRY void device_backend::do_write_tokens(nn::tensor& t, const std::vector<std::int32_t>& tokens) {
  staging_.upload(t.data(), tokens.data(), tokens.size() * sizeof(std::int32_t), stream_);
}
MXKIT_GPU_DEVICE_BACKEND_ENTRY std::vector<double> device_backend::do_read(const nn::tensor& t) const {
  const std::vector<std::uint8_t> host = download_bytes(t.data(), t.bytes(), stream_);
  std::vector<double> out(t.size());
  nn::visit_dtype(t.type(), [&](auto z) {
    using T = decltype(z);
    for (std::size_t i = 0; i < out.size(); ++i) {
      T v;
      std::memcpy(&v, host.data() + i * sizeof(T), sizeof(T));
      out[i] = nn::element_to_double(v);
    }
  });
  return out;
}
MXKIT_GPU_DEVICE_BACKEND_ENTRY void device_backend::do_synchronize() {
  MXKIT_GPU_CHECK(stream_synchronize(stream_));
  in_flight_.release_finished();
}
MXKIT_GPU_DEVICE_BACKEND_ENTRY void device_backend::do_fill(nn::tensor& t, double value) {
  nn::visit_dtype(t.type(), [&](auto z) {
    using T = decltype(z);
    gpu::fill(t.as<T>(), t.size(), nn::element_from_double<T>(value), stream_);
  });
}
MXKIT_GPU_DEVICE_BACKEND_ENTRY void device_backend::do_copy(const nn::tensor& src, nn::tensor& dst) {
  if (src.type() == dst.type()) {
    if (src.bytes()) MXKIT_GPU_CHECK(memcpy_async(dst.data(), src.data(), src.bytes(), copy_kind::device_to_device, stream_));
    return;
  }
  // Floating types (nn::backend::copy): converted as the host converts (convert_element).
  backend_detail::visit_float(src.type(), "copy", [&](auto s) {
    backend_detail::visit_float(dst.type(), "copy", [&](auto d) {
      gpu::convert(src.as<decltype(s)>(), dst.as<decltype(d)>(), src.size(), stream_);
    });
  });
}
MXKIT_GPU_DEVICE_BACKEND_ENTRY void device_backend::do_axpy(double alpha, const nn::tensor& x, nn::tensor& y) {
  backend_detail::visit_float(x.type(), "axpy", [&](auto z) {
    using T = decltype(z);
    gpu::axpy(alpha, x.as<T>(), y.as<T>(), x.size(), stream_);
  });
}
MXKIT_GPU_DEVICE_BACKEND_ENTRY void device_backend::do_amax(const nn::tensor& x, nn::tensor& out) {
  backend_detail::activation_types(x.type(), "amax", [&](auto z) {
    using T = decltype(z);
    gpu::amax(x.as<T>(), x.size(), out.as<double>(), amax_bits(), stream_);
  });
}
MXKIT_GPU_DEVICE_BACKEND_ENTRY void device_backend::do_copy_amax(const nn::tensor& x, const nn::quant_request& r, nn::tensor& out) {
  backend_detail::require_activation(x, "copy_amax");
  backend_detail::activation_types(x.type(), "copy_amax", [&](auto z) {
    using T = decltype(z);
    const matrix_view<const T> v{x.as<T>(), x.rows(), x.cols()};
    float* a = out.as<float>();
    gpu::nvfp4_amax(v, r.spec.block_scaled().format, r.nvfp4_quantize_options(), r.axis == block_axis::rowwise ? a : nullptr,
                    r.axis == block_axis::columnwise ? a : nullptr, stream_);
  });
}
MXKIT_GPU_DEVICE_BACKEND_ENTRY nn::qtensor device_backend::do_quantize(const nn::tensor& x, const nn::quant_request& r) {
  backend_detail::require_activation(x, "quantize");
  return r.spec.visit(nn::overloaded{
      [&](const nn::block_scaled_spec& b) {
        if (b.is_nvfp4()) {
          auto p = payloads_.nvfp4(r, x.rows(), x.cols());
          nvfp4_outputs out;
          (r.axis == block_axis::rowwise ? out.rowwise_data : out.columnwise_data) = p->data;
          (r.axis == block_axis::rowwise ? out.rowwise_scales : out.columnwise_scales) = p->scales;
          (r.axis == block_axis::rowwise ? out.rowwise_tensor_scale : out.columnwise_tensor_scale) = p->tensor_scale;
          run_nvfp4(x, r, out);
          return payloads_.finish(r, x.rows(), x.cols(), std::move(p));
        }
        auto p = payloads_.mx(r, x.rows(), x.cols());
        quantize_outputs out;
        (r.axis == block_axis::rowwise ? out.rowwise_data : out.columnwise_data) = p->data;
        (r.axis == block_axis::rowwise ? out.rowwise_scales : out.columnwise_scales) = p->scales;
        run_mx(x, r, out);
        return payloads_.finish(r, x.rows(), x.cols(), std::move(p));
      },
      [&](const nn::fp8_spec&) {
        auto p = payloads_.fp8(x.rows(), x.cols());
        fp8_outputs out;
        (r.axis == block_axis::rowwise ? out.data : out.transposed) = p->data;
        (r.axis == block_axis::rowwise ? out.data_scale : out.transposed_scale) = p->fp8_scale;
        run_fp8(x, r, out);
        return payloads_.finish(r, x.rows(), x.cols(), std::move(p));
      },
      [&](nn::bf16_spec) {
        if (r.may_alias_input && x.type() == nn::dtype::bf16) return payloads_.view_of(r, x);
        auto p = payloads_.bytes(x.rows() * x.cols() * sizeof(bfloat16));
        auto* out = reinterpret_cast<bfloat16*>(p->data);
        backend_detail::activation_types(x.type(), "quantize", [&](auto z) {
          using T = decltype(z);
          if (r.axis == block_axis::rowwise) gpu::convert(x.as<T>(), out, x.size(), stream_);
          else gpu::transpose(x.as<T>(), x.rows(), x.cols(), out, stream_);
        });
        return payloads_.finish(r, x.rows(), x.cols(), std::move(p));
      },
      [&](nn::native_spec) -> nn::qtensor {
        mxkit::detail::fail("device_backend: native (unrounded) operands belong to the host reference (ref::host_backend); "
                            "device recipes use bf16, fp8 or mx operands");
      },
  });
}
MXKIT_GPU_DEVICE_BACKEND_ENTRY nn::qpair device_backend::do_quantize_both(const nn::tensor& x, const nn::quant_request& row, const nn::quant_request& col) {
  const bool same_mx = row.spec.is<nn::block_scaled_spec>() && row.spec == col.spec && row.block == col.block &&
                       row.tensor_amax.same_as(col.tensor_amax);
  if (same_mx && row.spec.block_scaled().is_nvfp4()) {  // one call, both copies, each with its own tensor scale (or the given amax's)
    backend_detail::require_activation(x, "quantize_both");
    auto pr = payloads_.nvfp4(row, x.rows(), x.cols()), pc = payloads_.nvfp4(col, x.rows(), x.cols());
    nvfp4_outputs out;
    out.rowwise_data = pr->data;
    out.rowwise_scales = pr->scales;
    out.rowwise_tensor_scale = pr->tensor_scale;
    out.columnwise_data = pc->data;
    out.columnwise_scales = pc->scales;
    out.columnwise_tensor_scale = pc->tensor_scale;
    run_nvfp4(x, row, out);
    return {payloads_.finish(row, x.rows(), x.cols(), std::move(pr)), payloads_.finish(col, x.rows(), x.cols(), std::move(pc))};
  }
  if (same_mx) {  // one read, both copies (the fused kernel)
    backend_detail::require_activation(x, "quantize_both");
    auto pr = payloads_.mx(row, x.rows(), x.cols()), pc = payloads_.mx(col, x.rows(), x.cols());
    quantize_outputs out;
    out.rowwise_data = pr->data;
    out.rowwise_scales = pr->scales;
    out.columnwise_data = pc->data;
    out.columnwise_scales = pc->scales;
    run_mx(x, row, out);
    return {payloads_.finish(row, x.rows(), x.cols(), std::move(pr)), payloads_.finish(col, x.rows(), x.cols(), std::move(pc))};
  }
  const auto cast = [&](auto z, const nn::quant_request& r, const fp8_outputs& o) {
    using T = decltype(z);
    cast_fp8_delayed(matrix_view<const T>{x.as<T>(), x.rows(), x.cols()}, r.spec.fp8().type, fp8_scale_of(r), amax_history_of(r), o, overflow::saturate,
                     stream_);
  };
  const nn::quant_plan both{row, col, true};
  if (one_fp8_cast(both)) return write_one_fp8_cast(both, x.rows(), x.cols(), x.type(), "quantize_both", cast);  // codes and transpose, one cast
  if (row.spec.is<nn::bf16_spec>() && col.spec.is<nn::bf16_spec>()) {  // the rows, read both ways
    nn::quant_request rr = row;
    rr.may_alias_input = row.may_alias_input && col.may_alias_input;  // the columnwise copy may outlive x's promise
    nn::qtensor r = device_backend::do_quantize(x, rr);
    return {r, payloads_.alias_of(col, r)};
  }
  return {device_backend::do_quantize(x, row), device_backend::do_quantize(x, col)};
}
MXKIT_GPU_DEVICE_BACKEND_ENTRY nn::qtensor device_backend::do_transpose(const nn::qtensor& q, nn::operand_use use, nn::mem_tag tag) {
  nn::quant_request r = q.request();
  r.axis = block_axis::columnwise;
  r.use = use;
  r.tag = tag;
  r.fp8.record_amax = false;
  if (q.kind() == nn::precision::bf16) return payloads_.alias_of(r, q);  // the rows read MN-major, as quantize_both's pair
  const payload& src = payload_of(q);
  auto p = payloads_.fp8(q.rows(), q.cols());
  gpu::transpose(src.data, q.rows(), q.cols(), p->data, stream_);
  MXKIT_GPU_CHECK(memcpy_async(p->fp8_scale, src.fp8_scale, sizeof(float), copy_kind::device_to_device, stream_));
  return payloads_.finish(r, q.rows(), q.cols(), std::move(p));
}
MXKIT_GPU_DEVICE_BACKEND_ENTRY std::shared_ptr<std::uint8_t[]> device_backend::do_alloc_host(std::size_t bytes) {
  return alloc_pinned_host(bytes);
}
MXKIT_GPU_DEVICE_BACKEND_ENTRY nn::host_fp8 device_backend::do_export_fp8(const nn::tensor& w, fp8_type type, float scale) {
  backend_detail::require_activation(w, "export_fp8");
  const std::size_t n = w.size(), amax_at = (n + 15) / 16 * 16;
  std::shared_ptr<std::uint8_t[]> host = alloc_host(amax_at + sizeof(float));
  with_workspace<std::uint8_t>(amax_at + sizeof(float), [&](std::span<std::uint8_t> codes) {
    float* amax = reinterpret_cast<float*>(codes.data() + amax_at);
    backend_detail::activation_types(w.type(), "export_fp8", [&](auto z) {
      using T = decltype(z);
      cast_fp8(matrix_view<const T>{w.as<T>(), w.rows(), w.cols()}, type, scale, {codes.data(), nullptr, amax}, overflow::saturate, stream_);
    });
    MXKIT_GPU_CHECK(memcpy_async(host.get(), codes.data(), amax_at + sizeof(float), copy_kind::device_to_host, stream_));
    MXKIT_GPU_CHECK(stream_synchronize(stream_));
  });
  float amax = 0.0f;
  std::memcpy(&amax, host.get() + amax_at, sizeof(float));
  return nn::host_fp8(type, w.rows(), w.cols(), scale, amax, std::move(host));
}
MXKIT_GPU_DEVICE_BACKEND_ENTRY nn::qtensor device_backend::do_import_fp8(const nn::host_fp8& host, nn::operand_use use, nn::mem_tag tag) {
  nn::quant_request r;
  r.spec = nn::recipes::mma_operand(host.type());
  r.axis = block_axis::rowwise;
  r.use = use;
  r.tag = tag;
  auto p = payloads_.fp8(host.rows(), host.cols());
  // The upload runs on the copy stream after everything enqueued so far on the backend's stream
  // (the allocation, and the frees of the copies it replaces); the backend's stream waits for it.
  // From page-locked memory (export_fp8's stash, alloc_host) the copy is asynchronous; from
  // pageable memory the runtime stages it before returning.
  MXKIT_GPU_CHECK(event_record(order_, stream_));
  MXKIT_GPU_CHECK(stream_wait_event(copy_stream_, order_));
  if (host.bytes()) MXKIT_GPU_CHECK(memcpy_async(p->data, host.codes(), host.bytes(), copy_kind::host_to_device, copy_stream_));
  MXKIT_GPU_CHECK(event_record(order_, copy_stream_));
  MXKIT_GPU_CHECK(stream_wait_event(stream_, order_));
  in_flight_.keep(host, copy_stream_);
  detail::set_float_kernel<1><<<1, 1, 0, stream_>>>(p->fp8_scale, host.scale());
  MXKIT_GPU_CHECK_LAUNCH();
  return payloads_.finish(r, host.rows(), host.cols(), std::move(p));
}
MXKIT_GPU_DEVICE_BACKEND_ENTRY void device_backend::do_update_scales(nn::scaling_table& t) {
  gpu::update_scales(t.history().as<float>(), t.scale().as<float>(), t.fp8_max().as<float>(), t.rows(), t.config().history_length,
                     t.config(), stream_);
}
MXKIT_GPU_DEVICE_BACKEND_ENTRY void device_backend::do_gemm(gemm_product kind, const nn::qtensor& a, const nn::qtensor& b, nn::tensor& d,
                                                          float alpha, float beta, const nn::tensor* c) {
  // Every GEMM of this backend runs on stream_, so they can share one tile counter: the
  // dynamic order keeps the backward's GEMMs whole while a gradient reduction holds SMs.
  gemm_options options;
  options.tile_counter = tile_counter();
  options.reserved_sms = reserved_sms_;
  options.vendor = vendor_gemm_;
  backend_detail::run_gemm(kind, a, b, d, alpha, beta, c, stream_, options);
}
MXKIT_GPU_DEVICE_BACKEND_ENTRY void device_backend::do_rmsnorm_forward(const nn::tensor& x, const nn::tensor& w, nn::tensor& y, nn::tensor& rstd, double eps) {
  backend_detail::activation_types(x.type(), "rmsnorm", [&](auto z) {
    using T = decltype(z);
    backend_detail::activation_types(w.type(), "rmsnorm weight", [&](auto zw) {
      using W = decltype(zw);
      gpu::rmsnorm_forward(x.as<T>(), w.as<W>(), y.as<T>(), rstd.as<float>(), x.rows(), x.cols(), eps, stream_);
    });
  });
}
MXKIT_GPU_DEVICE_BACKEND_ENTRY void device_backend::do_rmsnorm_backward(const nn::tensor& dy, const nn::tensor& x, const nn::tensor& w, const nn::tensor& rstd, const nn::tensor& dr,
                         nn::tensor& dx, nn::tensor* dw) {
  backend_detail::activation_types(x.type(), "rmsnorm backward", [&](auto z) {
    using T = decltype(z);
    backend_detail::activation_types(w.type(), "rmsnorm weight", [&](auto zw) {  // a weight and its gradient: f32, or bf16 (bf16 layer weights)
      using W = decltype(zw);
      const std::size_t need = dw ? rmsnorm_backward_workspace(x.rows(), x.cols()) : 0;
      with_workspace<float>(need, [&](std::span<float> ws) {
        gpu::rmsnorm_backward(dy.as<T>(), x.as<T>(), w.as<W>(), rstd.as<float>(), dr.as<T>(), dx.as<T>(),
                              dw ? dw->as<W>() : static_cast<W*>(nullptr), x.rows(), x.cols(), ws, stream_);
      });
    });
  });
}
MXKIT_GPU_DEVICE_BACKEND_ENTRY void device_backend::do_rope(nn::tensor& qkv, const nn::head_shape& s, const nn::rope_frequencies& f, bool inverse) {
  backend_detail::activation_types(qkv.type(), "rope", [&](auto z) {
    using T = decltype(z);
    gpu::rope(qkv.as<T>(), s, f, inverse, rope_table(s, f), stream_);
  });
}
MXKIT_GPU_DEVICE_BACKEND_ENTRY void device_backend::do_attention_forward(const nn::tensor& qkv, nn::tensor& out, nn::tensor& lse, const nn::head_shape& s) {
  backend_detail::require_activation(qkv, "attention");
  with_workspace<std::byte>(attention_forward_workspace(s), [&](std::span<std::byte> ws) {
    if (qkv.type() == nn::dtype::bf16) {
      gpu::attention_forward(qkv.as<bfloat16>(), s.qkv_dim(), out.as<bfloat16>(), lse.as<float>(), s, ws, stream_);
      return;
    }
    nn::tensor q16 = as_bf16(qkv), o16 = scratch(out.rows(), out.cols(), nn::dtype::bf16);
    gpu::attention_forward(q16.as<bfloat16>(), s.qkv_dim(), o16.as<bfloat16>(), lse.as<float>(), s, ws, stream_);
    gpu::convert(o16.as<bfloat16>(), out.as<float>(), out.size(), stream_);
  });
}
MXKIT_GPU_DEVICE_BACKEND_ENTRY void device_backend::do_attention_backward(const nn::tensor& dout, const nn::tensor& qkv, const nn::tensor& out, const nn::tensor& lse,
                           nn::tensor& dqkv, const nn::head_shape& s) {
  backend_detail::require_activation(qkv, "attention backward");
  with_workspace<std::byte>(attention_backward_workspace(s), [&](std::span<std::byte> ws) {
    if (qkv.type() == nn::dtype::bf16) {
      gpu::attention_backward(dout.as<bfloat16>(), qkv.as<bfloat16>(), s.qkv_dim(), out.as<bfloat16>(), lse.as<float>(),
                              dqkv.as<bfloat16>(), s, ws, stream_);
      return;
    }
    const nn::tensor d16 = as_bf16(dout), q16 = as_bf16(qkv), o16 = as_bf16(out);
    nn::tensor dq16 = scratch(dqkv.rows(), dqkv.cols(), nn::dtype::bf16);
    gpu::attention_backward(d16.as<bfloat16>(), q16.as<bfloat16>(), s.qkv_dim(), o16.as<bfloat16>(), lse.as<float>(),
                            dq16.as<bfloat16>(), s, ws, stream_);
    gpu::convert(dq16.as<bfloat16>(), dqkv.as<float>(), dqkv.size(), stream_);
  });
}
MXKIT_GPU_DEVICE_BACKEND_ENTRY void device_backend::do_swiglu_forward(const nn::tensor& gu, nn::tensor& out) {
  backend_detail::activation_types(gu.type(), "swiglu", [&](auto z) {
    using T = decltype(z);
    gpu::swiglu_forward(gu.as<T>(), out.as<T>(), gu.rows(), gu.cols() / 2, stream_);
  });
}
MXKIT_GPU_DEVICE_BACKEND_ENTRY nn::qpair device_backend::do_swiglu_quantize(const nn::tensor& gu, const nn::quant_plan& plan, nn::tensor* out) {
  const auto cast = [&](auto z, const nn::quant_request& r, const fp8_outputs& o) {
    using T = decltype(z);
    gpu::swiglu_forward_fp8(gu.as<T>(), gu.rows(), gu.cols() / 2, r.spec.fp8().type, fp8_scale_of(r), amax_history_of(r), o, stream_);
  };
  if (!out && one_fp8_cast(plan)) return write_one_fp8_cast(plan, gu.rows(), gu.cols() / 2, gu.type(), "swiglu_quantize", cast);
  return nn::backend::do_swiglu_quantize(gu, plan, out);  // the unfused default
}
MXKIT_GPU_DEVICE_BACKEND_ENTRY void device_backend::do_swiglu_backward(const nn::tensor& dout, const nn::tensor& gu, nn::tensor& dgu) {
  backend_detail::activation_types(gu.type(), "swiglu backward", [&](auto z) {
    using T = decltype(z);
    gpu::swiglu_backward(dout.as<T>(), gu.as<T>(), dgu.as<T>(), gu.rows(), gu.cols() / 2, stream_);
  });
}
MXKIT_GPU_DEVICE_BACKEND_ENTRY void device_backend::do_embedding_forward(const nn::tensor& tokens, const nn::tensor& table, nn::tensor& out) {
  backend_detail::activation_types(out.type(), "embedding", [&](auto z) {
    using T = decltype(z);
    gpu::embedding_forward(tokens.as<std::int32_t>(), tokens.rows(), table.as<float>(), table.rows(), out.as<T>(), table.cols(),
                           flags_.as<std::int32_t>(), stream_);
  });
}
MXKIT_GPU_DEVICE_BACKEND_ENTRY void device_backend::do_embedding_backward(const nn::tensor& tokens, const nn::tensor& dout, nn::tensor& dtable) {
  backend_detail::activation_types(dout.type(), "embedding backward", [&](auto z) {
    using T = decltype(z);
    with_workspace<std::uint32_t>(embedding_backward_workspace(dtable.rows()), [&](std::span<std::uint32_t> ws) {
      gpu::embedding_backward(tokens.as<std::int32_t>(), tokens.rows(), dout.as<T>(), dtable.as<float>(), dtable.rows(), dtable.cols(),
                              flags_.as<std::int32_t>(), ws, stream_);
    });
  });
}
MXKIT_GPU_DEVICE_BACKEND_ENTRY void device_backend::do_cross_entropy(nn::tensor& logits, const nn::tensor& targets, const nn::tensor* mask,
                                                                     std::size_t first, nn::tensor* row_loss, nn::tensor* loss, bool gradient) {
  const std::int32_t* m = mask ? mask->as<std::int32_t>() : nullptr;
  backend_detail::activation_types(logits.type(), "cross_entropy", [&](auto z) {
    using T = decltype(z);
    gpu::cross_entropy_rows(logits.as<T>(), targets.as<std::int32_t>(), m, first, logits.rows(), targets.rows(), logits.cols(), gradient,
                            row_loss ? row_loss->as<double>() : nullptr, flags_.as<std::int32_t>() + 1, stream_);
  });
  if (!loss) return;
  float* loss32 = reinterpret_cast<float*>(scratch_.as<double>() + loss_slot);
  gpu::cross_entropy_mean(row_loss->as<double>(), m, targets.rows(), loss32, stream_);
  detail::float_to_double_kernel<1><<<1, 1, 0, stream_>>>(loss32, loss->as<double>());
  MXKIT_GPU_CHECK_LAUNCH();
}
MXKIT_GPU_DEVICE_BACKEND_ENTRY void device_backend::do_global_norm(std::span<const nn::tensor* const> tensors, double max_norm, nn::tensor& norm, nn::tensor& clip) {
  std::vector<norm_tensor<float>> list;
  list.reserve(tensors.size());
  // f64 tensors (a sharded optimizer's gathered per-rank norms, train/adamw.hpp) are read as float
  // copies: the device norm is a float result either way, and they are a few elements.
  std::vector<nn::tensor> narrowed;
  for (const nn::tensor* t : tensors) {
    if (t->type() == nn::dtype::f64) {
      narrowed.push_back(scratch(t->rows(), t->cols(), nn::dtype::f32));
      gpu::convert(t->as<double>(), narrowed.back().as<float>(), t->size(), stream_);
      list.push_back({narrowed.back().as<float>(), t->size()});
      continue;
    }
    backend_detail::require_param(*t, "global_norm");
    list.push_back({t->as<float>(), t->size()});
  }
  const norm_tensor<float>* dev = norm_list_.get(list, *this, staging_, stream_, kept_buffers_epoch_);
  grad_norm_result* r = norm_result();
  with_workspace<double>(global_norm_workspace, [&](std::span<double> ws) {
    gpu::global_norm(dev, list.size(), static_cast<float>(max_norm), r, ws, stream_);
  });
  detail::norm_to_scalars_kernel<1><<<1, 1, 0, stream_>>>(r, norm.as<double>(), clip.as<double>());
  MXKIT_GPU_CHECK_LAUNCH();
}
MXKIT_GPU_DEVICE_BACKEND_ENTRY void device_backend::do_adamw_step(std::span<const nn::adamw_slot_ref> slots, const nn::adamw_args& args, const nn::tensor& norm,
                   const nn::tensor& clip, nn::tensor& state) {
  std::vector<adamw_tensor<float>> list;
  list.reserve(slots.size());
  for (const nn::adamw_slot_ref& s : slots) {
    backend_detail::require_param(*s.param, "adamw_step");
    list.push_back({s.param->as<float>(), s.grad->as<float>(), s.m->as<float>(), s.v->as<float>(), s.param->size(),
                    static_cast<float>(s.weight_decay)});
  }
  const adamw_tensor<float>* dev = adamw_list_.get(list, *this, staging_, stream_, kept_buffers_epoch_);
  grad_norm_result* r = norm_result();
  adamw_step_counts* counts = reinterpret_cast<adamw_step_counts*>(scratch_.as<double>() + counts_slot);
  float* lr = reinterpret_cast<float*>(flags_.as<std::int32_t>() + 2);
  detail::scalars_to_norm_kernel<1><<<1, 1, 0, stream_>>>(norm.as<double>(), clip.as<double>(), r);
  MXKIT_GPU_CHECK_LAUNCH();
  detail::counts_from_state_kernel<1><<<1, 1, 0, stream_>>>(state.as<double>(), counts);
  MXKIT_GPU_CHECK_LAUNCH();
  // By value, a kernel argument a recorded step would replay unchanged; from lr_device, what the
  // caller filled before this step (nn/step_graph.hpp).
  if (args.lr_device) detail::double_to_float_kernel<1><<<1, 1, 0, stream_>>>(args.lr_device->as<double>(), lr);
  else detail::set_float_kernel<1><<<1, 1, 0, stream_>>>(lr, static_cast<float>(args.lr));
  MXKIT_GPU_CHECK_LAUNCH();
  const adamw_settings settings{static_cast<float>(args.beta1), static_cast<float>(args.beta2), static_cast<float>(args.eps)};
  gpu::adamw_update(dev, list.size(), lr, r, counts, settings, stream_);
  detail::counts_to_state_kernel<1><<<1, 1, 0, stream_>>>(counts, state.as<double>());
  MXKIT_GPU_CHECK_LAUNCH();
}
MXKIT_GPU_DEVICE_BACKEND_ENTRY nn::tensor device_backend::as_bf16(const nn::tensor& t) {
  nn::tensor out = scratch(t.rows(), t.cols(), nn::dtype::bf16);
  gpu::convert(t.as<float>(), out.as<bfloat16>(), t.size(), stream_);
  return out;
}
MXKIT_GPU_DEVICE_BACKEND_ENTRY const rope_factor* device_backend::rope_table(const nn::head_shape& s, const nn::rope_frequencies& f) {
  const bool same = rope_table_.defined() && rope_head_dim_ == s.head_dim && rope_frequencies_ == f;
  if (!same || rope_table_.rows() < s.seq) {
    const std::size_t seq = same ? std::max(s.seq, rope_table_.rows()) : s.seq;
    rope_table_ = scratch(seq, s.head_dim, nn::dtype::f32);  // (seq, head_dim / 2) float pairs
    ++kept_buffers_epoch_;  // a recorded step read the old table (device_step_graph::do_valid)
    rope_head_dim_ = s.head_dim;
    rope_frequencies_ = f;
    gpu::rope_factors(static_cast<rope_factor*>(rope_table_.data()), seq, s.head_dim, f, stream_);
  }
  return static_cast<const rope_factor*>(rope_table_.data());
}
MXKIT_GPU_DEVICE_BACKEND_ENTRY void device_backend::run_mx(const nn::tensor& x, const nn::quant_request& r, const quantize_outputs& out) {
  backend_detail::activation_types(x.type(), "quantize", [&](auto z) {
    using T = decltype(z);
    gpu::quantize(matrix_view<const T>{x.as<T>(), x.rows(), x.cols()}, r.spec.block_scaled().mx(), r.mx_options(), out, stream_);
  });
}
MXKIT_GPU_DEVICE_BACKEND_ENTRY void device_backend::run_nvfp4(const nn::tensor& x, const nn::quant_request& r, const nvfp4_outputs& out) {
  backend_detail::activation_types(x.type(), "quantize", [&](auto z) {
    using T = decltype(z);
    const nvfp4_tensor_scale_source source =
        r.tensor_amax.defined() ? nvfp4_tensor_scale_source::from_amax(r.tensor_amax.as<float>()) : nvfp4_tensor_scale_source{};
    gpu::quantize_nvfp4(matrix_view<const T>{x.as<T>(), x.rows(), x.cols()}, r.spec.block_scaled().format, r.nvfp4_quantize_options(), out,
                        source, stream_);
  });
}
MXKIT_GPU_DEVICE_BACKEND_ENTRY void device_backend::run_fp8(const nn::tensor& x, const nn::quant_request& r, const fp8_outputs& out) {
  backend_detail::activation_types(x.type(), "quantize", [&](auto z) {
    using T = decltype(z);
    cast_fp8_delayed(matrix_view<const T>{x.as<T>(), x.rows(), x.cols()}, r.spec.fp8().type, fp8_scale_of(r), amax_history_of(r), out,
                     overflow::saturate, stream_);
  });
}
#endif  // MXKIT_GPU_LIBRARY_DEFINES_DEVICE_BACKEND

}  // namespace gpu
MXKIT_END_NAMESPACE
