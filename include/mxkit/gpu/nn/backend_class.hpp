// SPDX-License-Identifier: Apache-2.0
#pragma once
// gpu::device_backend, the class: its state and the nn::backend (and nn::copy_gather) operations
// it overrides, declared. What the kernel library's users compile against (gpu/kernel_library.hpp,
// family DEVICE_BACKEND), so apart from the members that launch kernels: gpu/nn/backend.hpp's,
// inline for header-only use or compiled once in the kernel library. Include gpu/nn/backend.hpp,
// which includes this header and says what runs where.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <utility>
#include <vector>

#include <mxkit/gpu/platform.hpp>  // first: the vendor runtime before any MXKIT_HD code
#include <mxkit/gpu/fp8_cast.hpp>
#include <mxkit/gpu/memory.hpp>
#include <mxkit/gpu/nn/adamw.hpp>
#include <mxkit/gpu/nn/backend_adapters.hpp>
#include <mxkit/gpu/nn/device_step_graph.hpp>
#include <mxkit/gpu/nn/global_norm.hpp>
#include <mxkit/gpu/nn/host_transfers.hpp>
#include <mxkit/gpu/nn/operand_payload.hpp>
#include <mxkit/gpu/nn/rope.hpp>
#include <mxkit/gpu/quantize.hpp>
#include <mxkit/gpu/quantize_nvfp4.hpp>
#include <mxkit/gpu/runtime.hpp>
#include <mxkit/nn/backend.hpp>
#include <mxkit/parallel/copy_gather.hpp>

MXKIT_BEGIN_NAMESPACE
namespace gpu {

class device_backend : public nn::backend, public nn::copy_gather {
 public:
  // Storage of one quantized copy in device memory (gpu/nn/operand_payload.hpp).
  using payload = device_payload;

  device_backend();
  device_backend(const device_backend&) = delete;
  device_backend& operator=(const device_backend&) = delete;
  ~device_backend() override;

  const char* name() const noexcept override { return MXKIT_GPU_HIP ? "hip" : "cuda"; }
  nn::copy_gather* copy_gatherer() noexcept override { return this; }
  // The stream every operation is enqueued on.
  stream_t stream() const noexcept { return stream_; }
  // Quantized copies of kind p alive right now (anywhere: caches, saved operands, callers).
  std::size_t live_copies(nn::precision p) const noexcept { return live_[static_cast<std::size_t>(p)]; }
  // Where a copy's bytes are (tests read them: tests/gpu/device_backend_downloads.hpp).
  static const payload& get(const nn::qtensor& q) { return payload_of(q); }
  // SMs every GEMM leaves to collectives that may run beside it (gemm_options::reserved_sms): the
  // training program sets the communicator's CTA limit (nccl_options::ctas) here on several
  // ranks, where a gradient reduction or a prefetched gather overlaps the step's GEMMs. 0: none.
  void set_reserved_sms(std::uint32_t sms) noexcept { reserved_sms_ = sms; }
  std::uint32_t reserved_sms() const noexcept { return reserved_sms_; }
  // Whether the GEMMs may take the vendor path (cuBLASLt for bf16 and per-tensor FP8 copies,
  // gemm_options::vendor; the training programs' --gemm vendor turns it on). Off by default:
  // mxkit's own kernels keep a product's bits whatever the copies' storage order or the output
  // type, which the device tests that compare layouts and the host oracle rely on; cuBLASLt picks
  // its summation order per layout. Of the MX products only MXFP8's takes it: the bf16 product of
  // its expanded copies (gemm/sm90/dispatch.hpp).
  void set_vendor_gemm(bool on) noexcept { vendor_gemm_ = on; }
  bool vendor_gemm() const noexcept { return vendor_gemm_; }

 protected:
  // A CUDA/HIP graph of the step on stream_ (gpu/nn/device_step_graph.hpp), where the runtime
  // records the step's stream-ordered allocations (gpu::captures_allocations); else none.
  std::unique_ptr<nn::step_graph> do_make_step_graph() override {
    if (!captures_allocations()) return nullptr;
    return std::make_unique<device_step_graph>(stream_, kept_buffers_epoch_);
  }

  // ---- memory and transfers
  allocation do_alloc(std::size_t bytes, bool zero_fill) override;
  void do_write(nn::tensor& t, const std::vector<double>& values) override;
  void do_write_tokens(nn::tensor& t, const std::vector<std::int32_t>& tokens) override;
  std::vector<double> do_read(const nn::tensor& t) const override;
  void do_synchronize() override;
  void do_fill(nn::tensor& t, double value) override;
  void do_copy(const nn::tensor& src, nn::tensor& dst) override;
  void do_axpy(double alpha, const nn::tensor& x, nn::tensor& y) override;
  void do_amax(const nn::tensor& x, nn::tensor& out) override;
  void do_copy_amax(const nn::tensor& x, const nn::quant_request& r, nn::tensor& out) override;

  // ---- quantized operands
  nn::qtensor do_quantize(const nn::tensor& x, const nn::quant_request& r) override;

  nn::qpair do_quantize_both(const nn::tensor& x, const nn::quant_request& row, const nn::quant_request& col) override;

  nn::qtensor do_transpose(const nn::qtensor& q, nn::operand_use use, nn::mem_tag tag) override;

  // A weight's copies gathered from the ranks' slabs (parallel/copy_gather.hpp's wire format;
  // stream-ordered copies, operand_payload.hpp).
  bool do_gathers_copies() const noexcept override { return true; }
  void do_pack_copy(const nn::qtensor& q, nn::tensor& wire, std::size_t byte_offset) override {
    payloads_.pack(q, static_cast<std::uint8_t*>(wire.data()) + byte_offset);
  }
  nn::qtensor do_assemble_copy(const nn::quant_request& r, std::size_t rows, std::size_t cols, const nn::tensor& wire,
                               std::span<const nn::copy_slab> slabs) override {
    return payloads_.assembled(r, rows, cols, static_cast<const std::uint8_t*>(wire.data()), slabs);
  }

  // The stash in page-locked host memory: the codes come down straight into it, and go up from
  // it on the copy stream (a copy engine, no staging copy).
  std::shared_ptr<std::uint8_t[]> do_alloc_host(std::size_t bytes) override;
  nn::host_fp8 do_export_fp8(const nn::tensor& w, fp8_type type, float scale) override;
  nn::qtensor do_import_fp8(const nn::host_fp8& host, nn::operand_use use, nn::mem_tag tag) override;

  void do_update_scales(nn::scaling_table& t) override;

  void do_gemm(gemm_product kind, const nn::qtensor& a, const nn::qtensor& b, nn::tensor& d, float alpha, float beta,
               const nn::tensor* c) override;

  // ---- layer kernels
  void do_rmsnorm_forward(const nn::tensor& x, const nn::tensor& w, nn::tensor& y, nn::tensor& rstd, double eps) override;
  void do_rmsnorm_backward(const nn::tensor& dy, const nn::tensor& x, const nn::tensor& w, const nn::tensor& rstd, const nn::tensor& dr,
                           nn::tensor& dx, nn::tensor* dw) override;
  void do_rope(nn::tensor& qkv, const nn::head_shape& s, const nn::rope_frequencies& f, bool inverse) override;
  void do_attention_forward(const nn::tensor& qkv, nn::tensor& out, nn::tensor& lse, const nn::head_shape& s) override;
  void do_attention_backward(const nn::tensor& dout, const nn::tensor& qkv, const nn::tensor& out, const nn::tensor& lse,
                             nn::tensor& dqkv, const nn::head_shape& s) override;
  void do_swiglu_forward(const nn::tensor& gu, nn::tensor& out) override;
  // FP8 copies come straight from gu (the output is never stored, unless asked for); other
  // copies from the stored output.
  nn::qpair do_swiglu_quantize(const nn::tensor& gu, const nn::quant_plan& plan, nn::tensor* out) override;
  void do_swiglu_backward(const nn::tensor& dout, const nn::tensor& gu, nn::tensor& dgu) override;
  void do_embedding_forward(const nn::tensor& tokens, const nn::tensor& table, nn::tensor& out) override;
  void do_embedding_backward(const nn::tensor& tokens, const nn::tensor& dout, nn::tensor& dtable) override;
  void do_cross_entropy(nn::tensor& logits, const nn::tensor& targets, const nn::tensor* mask, std::size_t first, nn::tensor* row_loss,
                        nn::tensor* loss, bool gradient) override;

  // ---- optimizer
  void do_global_norm(std::span<const nn::tensor* const> tensors, double max_norm, nn::tensor& norm, nn::tensor& clip) override;
  void do_adamw_step(std::span<const nn::adamw_slot_ref> slots, const nn::adamw_args& args, const nn::tensor& norm,
                     const nn::tensor& clip, nn::tensor& state) override;

 private:
  // Slots of scratch_ (doubles): grad_norm_result (2), adamw counts (2), loss as float (1), amax
  // bits (1), the GEMMs' tile counter (1: two words, zero between GEMMs; gemm_options::tile_counter).
  static constexpr std::size_t norm_slot = 0, counts_slot = 2, loss_slot = 4, amax_slot = 5, tile_counter_slot = 6;
  static_assert(sizeof(grad_norm_result) <= 2 * sizeof(double) && sizeof(adamw_step_counts) <= 2 * sizeof(double));

  grad_norm_result* norm_result() { return reinterpret_cast<grad_norm_result*>(scratch_.as<double>() + norm_slot); }
  unsigned* amax_bits() { return reinterpret_cast<unsigned*>(scratch_.as<double>() + amax_slot); }
  std::uint32_t* tile_counter() { return reinterpret_cast<std::uint32_t*>(scratch_.as<double>() + tile_counter_slot); }

  void* pool_alloc(std::size_t bytes) { return pool_alloc_counted(bytes, stream_, counters_.driver_allocations); }
  // Temporary device memory for one call's kernels, returned in stream order.
  template <class T, class F>
  void with_workspace(std::size_t n, F&& f) {
    T* p = n ? static_cast<T*>(pool_alloc(n * sizeof(T))) : nullptr;
    try {
      f(std::span<T>(p, n));
    } catch (...) {
      deallocate_async(p, stream_);
      throw;
    }
    deallocate_async(p, stream_);
  }
  nn::tensor as_bf16(const nn::tensor& t);

  // The RoPE factors of every position up to the longest sequence seen, for one (head_dim,
  // frequencies): computed on the stream once (gpu::rope_factors), then read by every layer's RoPE
  // of every step instead of a double pow and sincos per pair and call.
  const rope_factor* rope_table(const nn::head_shape& s, const nn::rope_frequencies& f);

  void run_mx(const nn::tensor& x, const nn::quant_request& r, const quantize_outputs& out);
  void run_nvfp4(const nn::tensor& x, const nn::quant_request& r, const nvfp4_outputs& out);
  void run_fp8(const nn::tensor& x, const nn::quant_request& r, const fp8_outputs& out);
  // The plan's FP8 copies of a (rows, cols) result of activation type `type`, written by
  // cast(T{}, request, outputs) (the request records the amax if either copy's does): a cast of
  // a stored tensor (quantize_both) or a producer that writes them itself.
  template <class Cast>
  nn::qpair write_one_fp8_cast(const nn::quant_plan& plan, std::size_t rows, std::size_t cols, nn::dtype type, const char* what, Cast&& cast) {
    nn::quant_request r = plan.rowwise;
    if (plan.columnwise_wanted) r.fp8.record_amax = plan.rowwise.fp8.record_amax || plan.columnwise.fp8.record_amax;
    backend_detail::activation_types(type, what, [](auto) {});  // refused before anything is allocated
    auto pr = payloads_.fp8(rows, cols);
    fp8_outputs out{pr->data, nullptr, nullptr, pr->fp8_scale, nullptr};
    std::shared_ptr<payload> pc;
    if (plan.columnwise_wanted) {
      pc = payloads_.fp8(rows, cols);
      out.transposed = pc->data;
      out.transposed_scale = pc->fp8_scale;
    }
    backend_detail::activation_types(type, what, [&](auto z) { cast(z, r, out); });
    nn::qpair q{payloads_.finish(plan.rowwise, rows, cols, std::move(pr)), {}};
    if (pc) q.columnwise = payloads_.finish(plan.columnwise, rows, cols, std::move(pc));
    return q;
  }

  stream_t stream_ = nullptr, copy_stream_ = nullptr;
  std::uint32_t reserved_sms_ = 0;  // set_reserved_sms
  // Counts the kept buffers a recorded step reads that were replaced since (rope_table_, the
  // descriptor arrays): a step graph recorded before is no longer valid (device_step_graph).
  std::uint64_t kept_buffers_epoch_ = 0;
  bool vendor_gemm_ = false;        // set_vendor_gemm
  event_t order_ = nullptr;
  staging_ring staging_;
  uploads_in_flight in_flight_;
  payload_factory::live_counts live_{};  // by precision
  payload_factory payloads_;
  nn::tensor flags_, scratch_;
  nn::tensor rope_table_;
  std::size_t rope_head_dim_ = 0;
  nn::rope_frequencies rope_frequencies_{0.0, {}};
  backend_detail::descriptor_list<norm_tensor<float>> norm_list_;
  backend_detail::descriptor_list<adamw_tensor<float>> adamw_list_;
};

}  // namespace gpu
MXKIT_END_NAMESPACE
