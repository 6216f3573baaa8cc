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
//   operands   MX: gpu::quantize (both copies from one read when both are asked for); FP8:
//              gpu::cast_fp8_delayed, reading the scaling table's scale on the device and
//              max-combining the amax into the table's history, the scale it used kept with the
//              copy; bf16: a conversion (rowwise) or a converting transpose (columnwise). A bf16
//              columnwise copy is no copy at all where the GEMM can read the rows MN-major
//              (gpu::major_order): the rowwise copy made with it, or x itself when the request
//              allows (may_alias_input: wgrad's X and dY, and a bf16 master weight, which is
//              then its own fprop and dgrad copy).
//   GEMM       gpu/gemm (the sm90 path on Hopper, gfx950's MX path on CDNA4, else portable),
//              the FP8 descale read from the copies' device scales; C in the epilogue.
//   layers     gpu/nn/ kernels: rmsnorm, rope (from a factor table kept across calls), flash
//              attention (bf16 tensor cores: f32 activations are rounded to bf16 for attention,
//              its output widened back), swiglu, embedding, cross_entropy; global_norm and adamw
//              as multi-tensor kernels whose device descriptor arrays are kept between steps.
//   scalars    loss, norm, clip factor and step counts stay in device memory; one-thread
//              kernels move them between the kernels' layouts (gpu/nn/tensor_ops.hpp).
// Producers: swiglu_quantize writes its FP8 copies straight from gate/up (gpu::swiglu_forward_fp8:
// the output is never stored); its other copies, rmsnorm_quantize's and
// swiglu_backward_quantize's are nn::backend's unfused defaults: the kernel, then its output
// quantized (bench/NOTES_training.md has what fusing them measured). swiglu_backward_quantize's
// default releases dout behind the kernel, so its memory serves the copies. The embedding and
// cross-entropy kernels' range flags are never
// raised: write_tokens checks every id on the host before the upload.
// The healing stash: export_fp8 casts on the device and copies the codes to the host;
// import_fp8 uploads on a second stream (the copy engine) ordered after the backend's stream, so
// the MXFP4 copies freed before it are reused.
// Not here: native (unrounded) operands and f64 models (the gradient check): the host backend's.
// AMD: compiled for gfx942 and gfx950, never run (no AMD GPU was available to this project).
#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <span>
#include <type_traits>
#include <utility>
#include <vector>

#include <mxkit/error.hpp>
#include <mxkit/format/float16.hpp>
#include <mxkit/gpu/fp8_cast.hpp>
#include <mxkit/gpu/gemm/gemm.hpp>
#include <mxkit/gpu/memory.hpp>
#include <mxkit/gpu/nn/adamw.hpp>
#include <mxkit/gpu/nn/attention.hpp>
#include <mxkit/gpu/nn/cross_entropy.hpp>
#include <mxkit/gpu/nn/embedding.hpp>
#include <mxkit/gpu/nn/global_norm.hpp>
#include <mxkit/gpu/nn/rmsnorm.hpp>
#include <mxkit/gpu/nn/rope.hpp>
#include <mxkit/gpu/nn/swiglu.hpp>
#include <mxkit/gpu/nn/tensor_ops.hpp>
#include <mxkit/gpu/quantize.hpp>
#include <mxkit/gpu/runtime.hpp>
#include <mxkit/nn/backend.hpp>
#include <mxkit/tensor/fp8_tensor.hpp>
#include <mxkit/tensor/mx_tensor.hpp>

MXKIT_BEGIN_NAMESPACE
namespace gpu {

class device_backend : public nn::backend {
 public:
  // Storage of one quantized copy in device memory: one pool allocation holding the codes, then
  // the MX scales ([lines, blocks] row-major) or the FP8 scale.
  struct payload final : nn::qpayload {
    std::shared_ptr<void> memory;
    nn::tensor source;               // a view's tensor (view_of), kept alive with the copy
    std::uint8_t* data = nullptr;
    std::uint8_t* scales = nullptr;  // mx
    float* fp8_scale = nullptr;      // fp8: the scale the codes were made with
    mx_layout layout{};              // mx
    quantize_options options{};      // mx
    bool mn_major = false;           // bf16 columnwise: `data` holds the [length, lines] rows of its source
    nn::tracked_bytes tracked;
    std::size_t* live = nullptr;     // the backend's count of live copies of this kind
    payload() = default;
    payload(const payload&) = delete;
    payload& operator=(const payload&) = delete;
    ~payload() override {
      if (live) --*live;
    }
  };

  device_backend();
  device_backend(const device_backend&) = delete;
  device_backend& operator=(const device_backend&) = delete;
  ~device_backend() override;

  const char* name() const noexcept override { return MXKIT_GPU_HIP ? "hip" : "cuda"; }
  // The stream every operation is enqueued on.
  stream_t stream() const noexcept { return stream_; }
  // Quantized copies of kind p alive right now (anywhere: caches, saved operands, callers).
  std::size_t live_copies(nn::precision p) const noexcept { return live_[static_cast<std::size_t>(p)]; }

  // ---- host copies of device operands (tests and oracles; each waits for the stream)
  static const payload& get(const nn::qtensor& q) {
    const auto* p = dynamic_cast<const payload*>(q.payload());
    mxkit::detail::require(p != nullptr, "device_backend: the quantized copy was not made by a device_backend");
    return *p;
  }
  mx_tensor download_mx(const nn::qtensor& q) const {
    mxkit::detail::require(q.kind() == nn::precision::mx, "download_mx: a ", name_of(q.kind()), " copy");
    const payload& p = get(q);
    mx_tensor h(p.layout, p.options);
    h.set_data(download_bytes(p.data, p.layout.data_bytes()));
    h.set_scales(download_bytes(p.scales, p.layout.lines() * p.layout.blocks_per_line()));
    return h;
  }
  fp8_tensor download_fp8(const nn::qtensor& q) const {
    mxkit::detail::require(q.kind() == nn::precision::fp8, "download_fp8: a ", name_of(q.kind()), " copy");
    const payload& p = get(q);
    fp8_tensor t{q.request().spec.fp8, q.lines(), q.length(), 1.0f, 0.0f, download_bytes(p.data, q.rows() * q.cols())};
    const std::vector<std::uint8_t> s = download_bytes(reinterpret_cast<const std::uint8_t*>(p.fp8_scale), sizeof(float));
    std::memcpy(&t.scale, s.data(), sizeof(float));
    return t;
  }
  // The copy's [lines, length] values, however it is stored.
  std::vector<bfloat16> download_bf16(const nn::qtensor& q) const {
    mxkit::detail::require(q.kind() == nn::precision::bf16, "download_bf16: a ", name_of(q.kind()), " copy");
    const std::vector<std::uint8_t> b = download_bytes(get(q).data, q.rows() * q.cols() * sizeof(bfloat16));
    std::vector<bfloat16> out(q.rows() * q.cols());
    std::memcpy(out.data(), b.data(), b.size());
    if (!get(q).mn_major) return out;
    std::vector<bfloat16> lines(out.size());
    for (std::size_t r = 0; r < q.length(); ++r)
      for (std::size_t l = 0; l < q.lines(); ++l) lines[l * q.length() + r] = out[r * q.lines() + l];
    return lines;
  }

 protected:
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

  // ---- quantized operands
  nn::qtensor do_quantize(const nn::tensor& x, const nn::quant_request& r) override;

  nn::qpair do_quantize_both(const nn::tensor& x, const nn::quant_request& row, const nn::quant_request& col) override;

  nn::qtensor do_transpose(const nn::qtensor& q, nn::operand_use use, nn::mem_tag tag) override;

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
  void do_rope(nn::tensor& qkv, const nn::head_shape& s, double theta, bool inverse) override;
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
  void do_cross_entropy(nn::tensor& logits, const nn::tensor& targets, nn::tensor& loss, bool gradient) override;

  // ---- optimizer
  void do_global_norm(std::span<const nn::tensor* const> tensors, double max_norm, nn::tensor& norm, nn::tensor& clip) override;
  void do_adamw_step(std::span<const nn::adamw_slot_ref> slots, const nn::adamw_args& args, const nn::tensor& norm,
                     const nn::tensor& clip, nn::tensor& state) override;

 private:
  // Slots of scratch_ (doubles): grad_norm_result (2), adamw counts (2), loss as float (1), amax bits (1).
  static constexpr std::size_t norm_slot = 0, counts_slot = 2, loss_slot = 4, amax_slot = 5;
  static_assert(sizeof(grad_norm_result) <= 2 * sizeof(double) && sizeof(adamw_step_counts) <= 2 * sizeof(double));

  grad_norm_result* norm_result() { return reinterpret_cast<grad_norm_result*>(scratch_.as<double>() + norm_slot); }
  unsigned* amax_bits() { return reinterpret_cast<unsigned*>(scratch_.as<double>() + amax_slot); }

  // A multi-tensor kernel's descriptor array in device memory, uploaded again only when the list
  // changes (a model's parameters are the same every step).
  template <class D>
  class descriptor_list {
   public:
    const D* get(const std::vector<D>& list, device_backend& be) {
      const bool same = list.size() == host_.size() &&
                        std::equal(list.begin(), list.end(), host_.begin(), [](const D& a, const D& b) { return std::memcmp(&a, &b, sizeof(D)) == 0; });
      if (!same || !device_.defined()) {
        host_ = list;
        device_ = be.alloc(1, list.size() * sizeof(D) / sizeof(double) + 1, nn::dtype::f64, nn::mem_tag::optimizer);
        if (!list.empty()) be.upload(device_.data(), list.data(), list.size() * sizeof(D));
      }
      return static_cast<const D*>(device_.data());
    }

   private:
    std::vector<D> host_;
    nn::tensor device_;
  };

  void* pool_alloc(std::size_t bytes) {
    const std::size_t before = pool_reserved_bytes();
    void* p = allocate_async(bytes, stream_);
    if (pool_reserved_bytes() != before) ++counters_.driver_allocations;
    return p;
  }
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
  // theta): computed on the stream once (gpu::rope_factors), then read by every layer's RoPE of
  // every step instead of a double pow and sincos per pair and call.
  const rope_factor* rope_table(const nn::head_shape& s, double theta);

  // The host codes of an upload in flight on the copy stream stay alive (a shared owner kept
  // here) until the copy has finished: a caller may drop its host_fp8 as soon as import_fp8
  // returns. Finished ones are let go at the next import and at synchronize().
  void keep_until_copied(const nn::host_fp8& host) {
    release_copied();
    event_t done = nullptr;
    MXKIT_GPU_CHECK(event_create_timing_off(&done));
    MXKIT_GPU_CHECK(event_record(done, copy_stream_));
    in_flight_.push_back({host, done});
  }
  void release_copied() noexcept {
    std::erase_if(in_flight_, [](const in_flight& f) {
      if (event_query(f.done) != success) return false;
      (void)event_destroy(f.done);
      return true;
    });
  }

  // Host -> device through page-locked staging memory, so the copy is asynchronous. The staging
  // buffers form a ring: an upload waits only for the upload that last used its slot, several
  // uploads back (a step uploads its tokens and targets, so the host may run a few steps ahead of
  // the device instead of waiting for the previous step at every upload).
  void upload(void* dst, const void* src, std::size_t bytes, stream_t s = nullptr) {
    if (bytes == 0) return;
    if (!s) s = stream_;
    staging_slot& slot = staging_[next_slot_];
    next_slot_ = (next_slot_ + 1) % staging_.size();
    if (slot.done) MXKIT_GPU_CHECK(event_synchronize(slot.done));
    else MXKIT_GPU_CHECK(event_create_timing_off(&slot.done));
    if (bytes > slot.bytes) {
      if (slot.memory) MXKIT_GPU_CHECK(free_host_pinned(slot.memory));
      slot.memory = nullptr;
      slot.bytes = 0;
      MXKIT_GPU_CHECK(malloc_host_pinned(&slot.memory, bytes));
      slot.bytes = bytes;
    }
    std::memcpy(slot.memory, src, bytes);
    MXKIT_GPU_CHECK(memcpy_async(dst, slot.memory, bytes, copy_kind::host_to_device, s));
    MXKIT_GPU_CHECK(event_record(slot.done, s));
  }
  std::vector<std::uint8_t> download_bytes(const std::uint8_t* src, std::size_t bytes) const {
    std::vector<std::uint8_t> out(bytes);
    if (bytes) MXKIT_GPU_CHECK(memcpy_async(out.data(), src, bytes, copy_kind::device_to_host, stream_));
    MXKIT_GPU_CHECK(stream_synchronize(stream_));
    return out;
  }

  // ---- payloads
  std::shared_ptr<payload> bytes_payload(const nn::quant_request&, std::size_t bytes) {
    auto p = std::make_shared<payload>();
    const std::size_t n = bytes < 16 ? 16 : bytes;
    void* m = pool_alloc(n);
    p->memory = std::shared_ptr<void>(m, [s = stream_](void* d) { deallocate_async(d, s); });
    p->data = static_cast<std::uint8_t*>(m);
    return p;
  }
  std::shared_ptr<payload> mx_payload(const nn::quant_request& r, std::size_t rows, std::size_t cols) {
    const mx_layout layout{r.spec.mx, r.axis, rows, cols};
    const std::size_t data = (layout.data_bytes() + 255) / 256 * 256, scales = layout.lines() * layout.blocks_per_line();
    auto p = bytes_payload(r, data + scales);
    p->scales = p->data + data;
    p->layout = layout;
    p->options = r.mx_options();
    return p;
  }
  std::shared_ptr<payload> fp8_payload(const nn::quant_request& r, std::size_t rows, std::size_t cols) {
    const std::size_t data = (rows * cols + 15) / 16 * 16;
    auto p = bytes_payload(r, data + sizeof(float));
    p->fp8_scale = reinterpret_cast<float*>(p->data + data);
    return p;
  }
  // A bf16 activation as its own bf16 copy (the request allows it), rowwise as it is, columnwise
  // read MN-major: the payload shares x's memory and keeps it alive; no bytes are added to the
  // copies' count, none are moved.
  nn::qtensor view_of(const nn::quant_request& r, const nn::tensor& x) {
    auto p = std::make_shared<payload>();
    p->source = x;
    p->data = static_cast<std::uint8_t*>(x.data());
    p->mn_major = r.axis == block_axis::columnwise;
    p->live = &live_[static_cast<std::size_t>(r.spec.kind)];
    ++*p->live;
    return nn::qtensor(r, x.rows(), x.cols(), x.bytes(), std::move(p));
  }
  // The columnwise bf16 copy `r` of the tensor whose rowwise copy is `row`: the same bytes read
  // MN-major, kept alive with it; 0 bytes of its own.
  nn::qtensor alias_of(const nn::quant_request& r, const nn::qtensor& row) {
    const payload& src = get(row);
    auto p = std::make_shared<payload>();
    p->memory = src.memory;
    p->source = src.source;
    p->data = src.data;
    p->mn_major = true;
    p->live = &live_[static_cast<std::size_t>(r.spec.kind)];
    ++*p->live;
    return nn::qtensor(r, row.rows(), row.cols(), 0, std::move(p));
  }
  nn::qtensor finish(const nn::quant_request& r, std::size_t rows, std::size_t cols, std::shared_ptr<payload> p) {
    std::size_t bytes = rows * cols;
    if (r.spec.kind == nn::precision::mx) bytes = p->layout.data_bytes() + p->layout.lines() * p->layout.blocks_per_line();
    else if (r.spec.kind == nn::precision::fp8) bytes += sizeof(float);
    else bytes *= sizeof(bfloat16);
    p->tracked = nn::tracked_bytes(&memory_, r.tag, bytes);
    p->live = &live_[static_cast<std::size_t>(r.spec.kind)];
    ++*p->live;
    return nn::qtensor(r, rows, cols, bytes, std::move(p));
  }

  void run_mx(const nn::tensor& x, const nn::quant_request& r, const quantize_outputs& out);
  void run_fp8(const nn::tensor& x, const nn::quant_request& r, const fp8_outputs& out);
  // A plan whose copies one FP8 cast writes together: FP8 codes and, when wanted, their
  // transpose, of the same type and scaling row.
  static bool fp8_plan(const nn::quant_plan& p) {
    const nn::quant_request &r = p.rowwise, &c = p.columnwise;
    return r.spec.kind == nn::precision::fp8 &&
           (!p.columnwise_wanted || (c.spec.kind == nn::precision::fp8 && c.spec.fp8 == r.spec.fp8 && c.fp8.table == r.fp8.table &&
                                     c.fp8.row == r.fp8.row));
  }
  // An FP8 request's scale, and the history slot its amax goes to (null when it records none).
  static const float* scale_of(const nn::quant_request& r) { return r.fp8.table->scale().as<float>() + r.fp8.row; }
  static float* amax_history(const nn::quant_request& r) {
    nn::scaling_table& t = *r.fp8.table;
    return r.fp8.record_amax ? t.history().as<float>() + r.fp8.row * t.config().history_length : nullptr;
  }
  // The plan's FP8 copies of a (rows, cols) result of activation type `type`, written by
  // cast(T{}, request, outputs) (the request records the amax if either copy's does): a cast of
  // a stored tensor (quantize_both) or a producer that writes them itself.
  template <class Cast>
  nn::qpair write_fp8_plan(const nn::quant_plan& plan, std::size_t rows, std::size_t cols, nn::dtype type, const char* what, Cast&& cast) {
    nn::quant_request r = plan.rowwise;
    if (plan.columnwise_wanted) r.fp8.record_amax = plan.rowwise.fp8.record_amax || plan.columnwise.fp8.record_amax;
    activation_types(type, what, [](auto) {});  // refused before anything is allocated
    auto pr = fp8_payload(plan.rowwise, rows, cols);
    fp8_outputs out{pr->data, nullptr, nullptr, pr->fp8_scale, nullptr};
    std::shared_ptr<payload> pc;
    if (plan.columnwise_wanted) {
      pc = fp8_payload(plan.columnwise, rows, cols);
      out.transposed = pc->data;
      out.transposed_scale = pc->fp8_scale;
    }
    activation_types(type, what, [&](auto z) { cast(z, r, out); });
    nn::qpair q{finish(plan.rowwise, rows, cols, std::move(pr)), {}};
    if (pc) q.columnwise = finish(plan.columnwise, rows, cols, std::move(pc));
    return q;
  }
  // ---- element types
  // f(float{}) or f(bfloat16{}) for an activation type; f64 models are the host's.
  template <class F>
  static void activation_types(nn::dtype t, const char* what, F&& f) {
    if (t == nn::dtype::f32) f(float{});
    else if (t == nn::dtype::bf16) f(bfloat16{});
    else mxkit::detail::fail("device_backend: ", what, " on ", name_of(t), " data; the device runs f32 and bf16 models (f64 is the host's)");
  }
  static void require_activation(const nn::tensor& t, const char* what) {
    activation_types(t.type(), what, [](auto) {});
  }
  static void require_param(const nn::tensor& t, const char* what) {
    mxkit::detail::require(t.type() == nn::dtype::f32, "device_backend: ", what, " on ", name_of(t.type()),
                           " tensors; device parameters and gradients are f32");
  }
  template <class F>
  static void visit_float(nn::dtype t, const char* what, F&& f) {
    if (t == nn::dtype::f64) f(double{});
    else activation_types(t, what, f);
  }

  struct in_flight {
    nn::host_fp8 host;
    event_t done;
  };
  std::vector<in_flight> in_flight_;
  struct staging_slot {
    void* memory = nullptr;
    std::size_t bytes = 0;
    event_t done = nullptr;  // recorded after the slot's last upload
  };
  stream_t stream_ = nullptr, copy_stream_ = nullptr;
  event_t order_ = nullptr;
  std::array<staging_slot, 8> staging_{};
  std::size_t next_slot_ = 0;
  nn::tensor flags_, scratch_;
  nn::tensor rope_table_;
  std::size_t rope_head_dim_ = 0;
  double rope_theta_ = 0.0;
  descriptor_list<norm_tensor<float>> norm_list_;
  descriptor_list<adamw_tensor<float>> adamw_list_;
  std::array<std::size_t, 4> live_{};  // by precision
};

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
  flags_ = alloc(1, 4, nn::dtype::i32, nn::mem_tag::activation);  // [embedding error, cross-entropy error, lr bits, spare]
  scratch_ = alloc(1, 8, nn::dtype::f64, nn::mem_tag::optimizer);  // grad_norm_result, adamw counts, loss (float), amax bits
}
MXKIT_GPU_DEVICE_BACKEND_ENTRY device_backend::~device_backend() {
  (void)stream_synchronize(stream_);
  (void)stream_synchronize(copy_stream_);
  release_copied();
  flags_.reset();
  scratch_.reset();
  rope_table_.reset();  // freed on stream_, which goes below
  norm_list_ = {};
  adamw_list_ = {};
  (void)stream_synchronize(stream_);
  for (staging_slot& slot : staging_) {
    if (slot.memory) (void)free_host_pinned(slot.memory);
    if (slot.done) (void)event_destroy(slot.done);
  }
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
  upload(t.data(), host.data(), host.size());
}
MXKIT_GPU_DEVICE_BACKEND_ENTRY void device_backend::do_write_tokens(nn::tensor& t, const std::vector<std::int32_t>& tokens) {
  upload(t.data(), tokens.data(), tokens.size() * sizeof(std::int32_t));
}
MXKIT_GPU_DEVICE_BACKEND_ENTRY std::vector<double> device_backend::do_read(const nn::tensor& t) const {
  const std::vector<std::uint8_t> host = download_bytes(static_cast<const std::uint8_t*>(t.data()), t.bytes());
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
  release_copied();
}
MXKIT_GPU_DEVICE_BACKEND_ENTRY void device_backend::do_fill(nn::tensor& t, double value) {
  nn::visit_dtype(t.type(), [&](auto z) {
    using T = decltype(z);
    gpu::fill(t.as<T>(), t.size(), nn::element_from_double<T>(value), stream_);
  });
}
MXKIT_GPU_DEVICE_BACKEND_ENTRY void device_backend::do_copy(const nn::tensor& src, nn::tensor& dst) {
  if (src.bytes()) MXKIT_GPU_CHECK(memcpy_async(dst.data(), src.data(), src.bytes(), copy_kind::device_to_device, stream_));
}
MXKIT_GPU_DEVICE_BACKEND_ENTRY void device_backend::do_axpy(double alpha, const nn::tensor& x, nn::tensor& y) {
  visit_float(x.type(), "axpy", [&](auto z) {
    using T = decltype(z);
    gpu::axpy(alpha, x.as<T>(), y.as<T>(), x.size(), stream_);
  });
}
MXKIT_GPU_DEVICE_BACKEND_ENTRY void device_backend::do_amax(const nn::tensor& x, nn::tensor& out) {
  activation_types(x.type(), "amax", [&](auto z) {
    using T = decltype(z);
    gpu::amax(x.as<T>(), x.size(), out.as<double>(), amax_bits(), stream_);
  });
}
MXKIT_GPU_DEVICE_BACKEND_ENTRY nn::qtensor device_backend::do_quantize(const nn::tensor& x, const nn::quant_request& r) {
  require_activation(x, "quantize");
  switch (r.spec.kind) {
    case nn::precision::mx: {
      auto p = mx_payload(r, x.rows(), x.cols());
      quantize_outputs out;
      (r.axis == block_axis::rowwise ? out.rowwise_data : out.columnwise_data) = p->data;
      (r.axis == block_axis::rowwise ? out.rowwise_scales : out.columnwise_scales) = p->scales;
      run_mx(x, r, out);
      return finish(r, x.rows(), x.cols(), std::move(p));
    }
    case nn::precision::fp8: {
      auto p = fp8_payload(r, x.rows(), x.cols());
      fp8_outputs out;
      (r.axis == block_axis::rowwise ? out.data : out.transposed) = p->data;
      (r.axis == block_axis::rowwise ? out.data_scale : out.transposed_scale) = p->fp8_scale;
      run_fp8(x, r, out);
      return finish(r, x.rows(), x.cols(), std::move(p));
    }
    case nn::precision::bf16: {
      if (r.may_alias_input && x.type() == nn::dtype::bf16) return view_of(r, x);
      auto p = bytes_payload(r, x.rows() * x.cols() * sizeof(bfloat16));
      auto* out = reinterpret_cast<bfloat16*>(p->data);
      activation_types(x.type(), "quantize", [&](auto z) {
        using T = decltype(z);
        if (r.axis == block_axis::rowwise) gpu::convert(x.as<T>(), out, x.size(), stream_);
        else gpu::transpose(x.as<T>(), x.rows(), x.cols(), out, stream_);
      });
      return finish(r, x.rows(), x.cols(), std::move(p));
    }
    case nn::precision::native: break;
  }
  mxkit::detail::fail("device_backend: native (unrounded) operands belong to the host reference (ref::host_backend); "
                      "device recipes use bf16, fp8 or mx operands");
}
MXKIT_GPU_DEVICE_BACKEND_ENTRY nn::qpair device_backend::do_quantize_both(const nn::tensor& x, const nn::quant_request& row, const nn::quant_request& col) {
  const bool same_mx = row.spec.kind == nn::precision::mx && col.spec.kind == nn::precision::mx && row.spec == col.spec &&
                       row.mx_options() == col.mx_options();
  if (same_mx) {  // one read, both copies (the fused kernel)
    require_activation(x, "quantize_both");
    auto pr = mx_payload(row, x.rows(), x.cols()), pc = mx_payload(col, x.rows(), x.cols());
    quantize_outputs out;
    out.rowwise_data = pr->data;
    out.rowwise_scales = pr->scales;
    out.columnwise_data = pc->data;
    out.columnwise_scales = pc->scales;
    run_mx(x, row, out);
    return {finish(row, x.rows(), x.cols(), std::move(pr)), finish(col, x.rows(), x.cols(), std::move(pc))};
  }
  const auto cast = [&](auto z, const nn::quant_request& r, const fp8_outputs& o) {
    using T = decltype(z);
    cast_fp8_delayed(matrix_view<const T>{x.as<T>(), x.rows(), x.cols()}, r.spec.fp8, scale_of(r), amax_history(r), o, overflow::saturate,
                     stream_);
  };
  const nn::quant_plan both{row, col, true};
  if (fp8_plan(both)) return write_fp8_plan(both, x.rows(), x.cols(), x.type(), "quantize_both", cast);  // codes and transpose, one cast
  if (row.spec.kind == nn::precision::bf16 && col.spec.kind == nn::precision::bf16) {  // the rows, read both ways
    nn::quant_request rr = row;
    rr.may_alias_input = row.may_alias_input && col.may_alias_input;  // the columnwise copy may outlive x's promise
    nn::qtensor r = device_backend::do_quantize(x, rr);
    return {r, alias_of(col, r)};
  }
  return {device_backend::do_quantize(x, row), device_backend::do_quantize(x, col)};
}
MXKIT_GPU_DEVICE_BACKEND_ENTRY nn::qtensor device_backend::do_transpose(const nn::qtensor& q, nn::operand_use use, nn::mem_tag tag) {
  nn::quant_request r = q.request();
  r.axis = block_axis::columnwise;
  r.use = use;
  r.tag = tag;
  r.fp8.record_amax = false;
  const payload& src = get(q);
  auto p = fp8_payload(r, q.rows(), q.cols());
  gpu::transpose(src.data, q.rows(), q.cols(), p->data, stream_);
  MXKIT_GPU_CHECK(memcpy_async(p->fp8_scale, src.fp8_scale, sizeof(float), copy_kind::device_to_device, stream_));
  return finish(r, q.rows(), q.cols(), std::move(p));
}
MXKIT_GPU_DEVICE_BACKEND_ENTRY std::shared_ptr<std::uint8_t[]> device_backend::do_alloc_host(std::size_t bytes) {
  void* p = nullptr;
  MXKIT_GPU_CHECK(malloc_host_pinned(&p, bytes ? bytes : 1));
  return std::shared_ptr<std::uint8_t[]>(static_cast<std::uint8_t*>(p), [](std::uint8_t* d) { (void)free_host_pinned(d); });
}
MXKIT_GPU_DEVICE_BACKEND_ENTRY nn::host_fp8 device_backend::do_export_fp8(const nn::tensor& w, fp8_type type, float scale) {
  require_activation(w, "export_fp8");
  const std::size_t n = w.size(), amax_at = (n + 15) / 16 * 16;
  std::shared_ptr<std::uint8_t[]> host = alloc_host(amax_at + sizeof(float));
  with_workspace<std::uint8_t>(amax_at + sizeof(float), [&](std::span<std::uint8_t> codes) {
    float* amax = reinterpret_cast<float*>(codes.data() + amax_at);
    activation_types(w.type(), "export_fp8", [&](auto z) {
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
  auto p = fp8_payload(r, host.rows(), host.cols());
  // The upload runs on the copy stream after everything enqueued so far on the backend's stream
  // (the allocation, and the frees of the copies it replaces); the backend's stream waits for it.
  // From page-locked memory (export_fp8's stash, alloc_host) the copy is asynchronous; from
  // pageable memory the runtime stages it before returning.
  MXKIT_GPU_CHECK(event_record(order_, stream_));
  MXKIT_GPU_CHECK(stream_wait_event(copy_stream_, order_));
  if (host.bytes()) MXKIT_GPU_CHECK(memcpy_async(p->data, host.codes(), host.bytes(), copy_kind::host_to_device, copy_stream_));
  MXKIT_GPU_CHECK(event_record(order_, copy_stream_));
  MXKIT_GPU_CHECK(stream_wait_event(stream_, order_));
  keep_until_copied(host);
  detail::set_float_kernel<1><<<1, 1, 0, stream_>>>(p->fp8_scale, host.scale());
  MXKIT_GPU_CHECK_LAUNCH();
  return finish(r, host.rows(), host.cols(), std::move(p));
}
MXKIT_GPU_DEVICE_BACKEND_ENTRY void device_backend::do_update_scales(nn::scaling_table& t) {
  gpu::update_scales(t.history().as<float>(), t.scale().as<float>(), t.fp8_max().as<float>(), t.rows(), t.config().history_length,
                     t.config(), stream_);
}
MXKIT_GPU_DEVICE_BACKEND_ENTRY void device_backend::do_gemm(gemm_product kind, const nn::qtensor& a, const nn::qtensor& b, nn::tensor& d, float alpha, float beta,
             const nn::tensor* c) {
  mxkit::detail::require(d.type() == nn::dtype::f32 || d.type() == nn::dtype::bf16, "device_backend: ", name_of(kind),
                         " output is ", name_of(d.type()), "; the device writes f32 or bf16");
  const gemm_output_desc out{d.data(), c && beta != 0.0f ? c->data() : d.data(), d.cols(), d.cols(), d.type() == nn::dtype::bf16, alpha, beta};
  const payload& pa = get(a);
  const payload& pb = get(b);
  switch (a.kind()) {
    case nn::precision::mx: {
      const mx_const_view va{pa.layout, pa.options, pa.data, pa.scales, scale_layout::row_major};
      const mx_const_view vb{pb.layout, pb.options, pb.data, pb.scales, scale_layout::row_major};
      mxkit::detail::check_mx_product(kind, va.layout, vb.layout);
      mxkit::detail::check_rotation(va.options, vb.options, name_of(kind));
      detail::run(make_operand(va), make_operand(vb), out, stream_, {});
      return;
    }
    case nn::precision::fp8: {
      auto operand = [](const nn::qtensor& q, const payload& p) {
        gemm_operand o = make_operand(fp8_view{q.request().spec.fp8, q.lines(), q.length(), 1.0f, p.data});
        o.scale = p.fp8_scale;
        return o;
      };
      detail::run(operand(a, pa), operand(b, pb), out, stream_, {});
      return;
    }
    case nn::precision::bf16: {
      auto operand = [](const nn::qtensor& q, const payload& p) {
        const auto* data = reinterpret_cast<const bfloat16*>(p.data);
        return p.mn_major ? make_operand(matrix_view<const bfloat16>{data, q.length(), q.lines()}, major_order::mn_major)
                          : make_operand(matrix_view<const bfloat16>{data, q.lines(), q.length()});
      };
      detail::run(operand(a, pa), operand(b, pb), out, stream_, {});
      return;
    }
    case nn::precision::native: break;
  }
  mxkit::detail::fail("device_backend: ", name_of(kind), " on native operands (the host reference's)");
}
MXKIT_GPU_DEVICE_BACKEND_ENTRY void device_backend::do_rmsnorm_forward(const nn::tensor& x, const nn::tensor& w, nn::tensor& y, nn::tensor& rstd, double eps) {
  activation_types(x.type(), "rmsnorm", [&](auto z) {
    using T = decltype(z);
    activation_types(w.type(), "rmsnorm weight", [&](auto zw) {
      using W = decltype(zw);
      gpu::rmsnorm_forward(x.as<T>(), w.as<W>(), y.as<T>(), rstd.as<float>(), x.rows(), x.cols(), eps, stream_);
    });
  });
}
MXKIT_GPU_DEVICE_BACKEND_ENTRY void device_backend::do_rmsnorm_backward(const nn::tensor& dy, const nn::tensor& x, const nn::tensor& w, const nn::tensor& rstd, const nn::tensor& dr,
                         nn::tensor& dx, nn::tensor* dw) {
  activation_types(x.type(), "rmsnorm backward", [&](auto z) {
    using T = decltype(z);
    activation_types(w.type(), "rmsnorm weight", [&](auto zw) {  // a weight and its gradient: f32, or bf16 (bf16 layer weights)
      using W = decltype(zw);
      const std::size_t need = dw ? rmsnorm_backward_workspace(x.rows(), x.cols()) : 0;
      with_workspace<float>(need, [&](std::span<float> ws) {
        gpu::rmsnorm_backward(dy.as<T>(), x.as<T>(), w.as<W>(), rstd.as<float>(), dr.as<T>(), dx.as<T>(),
                              dw ? dw->as<W>() : static_cast<W*>(nullptr), x.rows(), x.cols(), ws, stream_);
      });
    });
  });
}
MXKIT_GPU_DEVICE_BACKEND_ENTRY void device_backend::do_rope(nn::tensor& qkv, const nn::head_shape& s, double theta, bool inverse) {
  activation_types(qkv.type(), "rope", [&](auto z) {
    using T = decltype(z);
    gpu::rope(qkv.as<T>(), s, theta, inverse, rope_table(s, theta), stream_);
  });
}
MXKIT_GPU_DEVICE_BACKEND_ENTRY void device_backend::do_attention_forward(const nn::tensor& qkv, nn::tensor& out, nn::tensor& lse, const nn::head_shape& s) {
  require_activation(qkv, "attention");
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
  require_activation(qkv, "attention backward");
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
  activation_types(gu.type(), "swiglu", [&](auto z) {
    using T = decltype(z);
    gpu::swiglu_forward(gu.as<T>(), out.as<T>(), gu.rows(), gu.cols() / 2, stream_);
  });
}
MXKIT_GPU_DEVICE_BACKEND_ENTRY nn::qpair device_backend::do_swiglu_quantize(const nn::tensor& gu, const nn::quant_plan& plan, nn::tensor* out) {
  const auto cast = [&](auto z, const nn::quant_request& r, const fp8_outputs& o) {
    using T = decltype(z);
    gpu::swiglu_forward_fp8(gu.as<T>(), gu.rows(), gu.cols() / 2, r.spec.fp8, scale_of(r), amax_history(r), o, stream_);
  };
  if (!out && fp8_plan(plan)) return write_fp8_plan(plan, gu.rows(), gu.cols() / 2, gu.type(), "swiglu_quantize", cast);
  return nn::backend::do_swiglu_quantize(gu, plan, out);  // the unfused default
}
MXKIT_GPU_DEVICE_BACKEND_ENTRY void device_backend::do_swiglu_backward(const nn::tensor& dout, const nn::tensor& gu, nn::tensor& dgu) {
  activation_types(gu.type(), "swiglu backward", [&](auto z) {
    using T = decltype(z);
    gpu::swiglu_backward(dout.as<T>(), gu.as<T>(), dgu.as<T>(), gu.rows(), gu.cols() / 2, stream_);
  });
}
MXKIT_GPU_DEVICE_BACKEND_ENTRY void device_backend::do_embedding_forward(const nn::tensor& tokens, const nn::tensor& table, nn::tensor& out) {
  activation_types(out.type(), "embedding", [&](auto z) {
    using T = decltype(z);
    gpu::embedding_forward(tokens.as<std::int32_t>(), tokens.rows(), table.as<float>(), table.rows(), out.as<T>(), table.cols(),
                           flags_.as<std::int32_t>(), stream_);
  });
}
MXKIT_GPU_DEVICE_BACKEND_ENTRY void device_backend::do_embedding_backward(const nn::tensor& tokens, const nn::tensor& dout, nn::tensor& dtable) {
  activation_types(dout.type(), "embedding backward", [&](auto z) {
    using T = decltype(z);
    with_workspace<std::uint32_t>(embedding_backward_workspace(dtable.rows()), [&](std::span<std::uint32_t> ws) {
      gpu::embedding_backward(tokens.as<std::int32_t>(), tokens.rows(), dout.as<T>(), dtable.as<float>(), dtable.rows(), dtable.cols(),
                              flags_.as<std::int32_t>(), ws, stream_);
    });
  });
}
MXKIT_GPU_DEVICE_BACKEND_ENTRY void device_backend::do_cross_entropy(nn::tensor& logits, const nn::tensor& targets, nn::tensor& loss, bool gradient) {
  activation_types(logits.type(), "cross_entropy", [&](auto z) {
    using T = decltype(z);
    float* loss32 = reinterpret_cast<float*>(scratch_.as<double>() + loss_slot);
    with_workspace<float>(cross_entropy_workspace(logits.rows()), [&](std::span<float> ws) {
      gpu::cross_entropy(logits.as<T>(), targets.as<std::int32_t>(), logits.rows(), logits.cols(), gradient, loss32,
                         flags_.as<std::int32_t>() + 1, ws, stream_);
    });
    detail::float_to_double_kernel<1><<<1, 1, 0, stream_>>>(loss32, loss.as<double>());
    MXKIT_GPU_CHECK_LAUNCH();
  });
}
MXKIT_GPU_DEVICE_BACKEND_ENTRY void device_backend::do_global_norm(std::span<const nn::tensor* const> tensors, double max_norm, nn::tensor& norm, nn::tensor& clip) {
  std::vector<norm_tensor<float>> list;
  list.reserve(tensors.size());
  // f64 tensors (a sharded optimizer's gathered per-rank norms, nn/adamw.hpp) are read as float
  // copies: the device norm is a float result either way, and they are a few elements.
  std::vector<nn::tensor> narrowed;
  for (const nn::tensor* t : tensors) {
    if (t->type() == nn::dtype::f64) {
      narrowed.push_back(scratch(t->rows(), t->cols(), nn::dtype::f32));
      gpu::convert(t->as<double>(), narrowed.back().as<float>(), t->size(), stream_);
      list.push_back({narrowed.back().as<float>(), t->size()});
      continue;
    }
    require_param(*t, "global_norm");
    list.push_back({t->as<float>(), t->size()});
  }
  const norm_tensor<float>* dev = norm_list_.get(list, *this);
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
    require_param(*s.param, "adamw_step");
    list.push_back({s.param->as<float>(), s.grad->as<float>(), s.m->as<float>(), s.v->as<float>(), s.param->size(),
                    static_cast<float>(s.weight_decay)});
  }
  const adamw_tensor<float>* dev = adamw_list_.get(list, *this);
  grad_norm_result* r = norm_result();
  adamw_step_counts* counts = reinterpret_cast<adamw_step_counts*>(scratch_.as<double>() + counts_slot);
  float* lr = reinterpret_cast<float*>(flags_.as<std::int32_t>() + 2);
  detail::scalars_to_norm_kernel<1><<<1, 1, 0, stream_>>>(norm.as<double>(), clip.as<double>(), r);
  MXKIT_GPU_CHECK_LAUNCH();
  detail::counts_from_state_kernel<1><<<1, 1, 0, stream_>>>(state.as<double>(), counts);
  MXKIT_GPU_CHECK_LAUNCH();
  detail::set_float_kernel<1><<<1, 1, 0, stream_>>>(lr, static_cast<float>(args.lr));
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
MXKIT_GPU_DEVICE_BACKEND_ENTRY const rope_factor* device_backend::rope_table(const nn::head_shape& s, double theta) {
  const bool same = rope_table_.defined() && rope_head_dim_ == s.head_dim && rope_theta_ == theta;
  if (!same || rope_table_.rows() < s.seq) {
    const std::size_t seq = same ? std::max(s.seq, rope_table_.rows()) : s.seq;
    rope_table_ = scratch(seq, s.head_dim, nn::dtype::f32);  // (seq, head_dim / 2) float pairs
    rope_head_dim_ = s.head_dim;
    rope_theta_ = theta;
    gpu::rope_factors(static_cast<rope_factor*>(rope_table_.data()), seq, s.head_dim, theta, stream_);
  }
  return static_cast<const rope_factor*>(rope_table_.data());
}
MXKIT_GPU_DEVICE_BACKEND_ENTRY void device_backend::run_mx(const nn::tensor& x, const nn::quant_request& r, const quantize_outputs& out) {
  activation_types(x.type(), "quantize", [&](auto z) {
    using T = decltype(z);
    gpu::quantize(matrix_view<const T>{x.as<T>(), x.rows(), x.cols()}, r.spec.mx, r.mx_options(), out, stream_);
  });
}
MXKIT_GPU_DEVICE_BACKEND_ENTRY void device_backend::run_fp8(const nn::tensor& x, const nn::quant_request& r, const fp8_outputs& out) {
  activation_types(x.type(), "quantize", [&](auto z) {
    using T = decltype(z);
    cast_fp8_delayed(matrix_view<const T>{x.as<T>(), x.rows(), x.cols()}, r.spec.fp8, scale_of(r), amax_history(r), out,
                     overflow::saturate, stream_);
  });
}
#endif  // MXKIT_GPU_LIBRARY_DEFINES_DEVICE_BACKEND

}  // namespace gpu
MXKIT_END_NAMESPACE
