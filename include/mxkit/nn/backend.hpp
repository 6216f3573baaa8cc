// SPDX-License-Identifier: Apache-2.0
#pragma once
// The one interface between the nn layers and the hardware. Layers (linear, transformer_layer,
// model, adamw, trainer) allocate tensors and call these operations; ref::host_backend
// (host/host_backend.hpp) implements them on the CPU with mxkit's host quantizer, reference GEMMs
// and the ref/nn/ kernels, a GPU backend implements them with device kernels on its stream.
//
// Contract (what a device backend may rely on, and what it must provide)
//
// 1. Checks once. Every operation is a public non-virtual function of this class: it checks
//    shapes, element types and counts (the `calls` counters), then calls one protected virtual
//    do_*() with arguments that are known to be consistent. A backend implements the do_*()
//    functions and repeats none of the checks; nothing reaches it that the public function
//    refused. (Library-level checks inside the numerics, e.g. ref::product's block-axis check,
//    stay where they are.)
// 2. Streams and memory. A backend owns one stream; every operation is enqueued on it, in call
//    order, and returns without waiting. Only read(), read_scalar(), export_fp8() and
//    synchronize() wait, and each counts in counters().host_reads (or synchronizations).
//    alloc() memory is zero-filled (alloc_uninitialized(): not) and comes from a stream-ordered pool (cudaMallocAsync-style,
//    released to the pool when the last tensor handle drops): once a step's shapes have been
//    seen, a step allocates nothing from the driver (counters().driver_allocations stays put) and
//    never synchronizes the device. The host backend's stream is the calling thread (in order by
//    construction) and its pool caches blocks by size. memory() counts live bytes and peaks by
//    tag either way.
// 3. Scalars stay on the device. The loss, the global gradient norm, the clipping factor, the
//    optimizer's step counters are (1, 1) f64 tensors (one value: the width costs nothing and the
//    host reference's double arithmetic carries over). cross_entropy writes the loss,
//    global_norm reduces every gradient tensor in one multi-tensor pass and writes norm and
//    clip factor, adamw_step updates every parameter in one multi-tensor pass, reading both
//    through pointers (a non-finite norm skips the step on the device and counts it). The host
//    reads the loss only when it logs (train/training.hpp).
// 4. Delayed scaling on the device (nn/delayed_scaling.hpp). An FP8 request names a row of a
//    scaling_table; the cast reads scale[row] through a pointer, stores the scale it used with
//    the copy (the GEMM's descale) and, when asked, max-combines its amax into history[row, 0].
//    update_scales() is one fused kernel per step over the whole table. Weight caches are keyed
//    by (weight version, the table's scale version), not by comparing floats.
// 5. Attention saves the log-sum-exp (batch*n_heads, seq) in stat_type(activations), never the
//    probabilities; the backward pass takes q, k, v, the output and the log-sum-exp and
//    recomputes the probabilities (FlashAttention-2, Dao 2023: D = rowsum(dO * O),
//    dS = P * (dP - D)).
// 6. Types. Activations are f32 or bf16 (the recipe's `activations`), f64 in the gradient
//    check; parameters, gradients and moments f32 (f64); tokens and targets (tokens, 1) i32
//    tensors uploaded once per batch (write_tokens checks the range on the host, before upload).
// 7. Producers of quantized copies: rmsnorm_quantize, swiglu_quantize and swiglu_backward_quantize
//    hand back the copies of their output (byte-identical to quantizing the output the unfused
//    op stores, rounded to its dtype), in one pass where a backend fuses them, and the output
//    itself only when asked for (the defaults here run the unfused operation into scratch and
//    quantize its output: a backend overrides a producer only where it fuses it); gemm has a
//    C operand (D = alpha A.B^T + beta C: the residual add in the epilogue); cross_entropy
//    writes the logits' gradient in place of the logits.
//
// Operations (shapes: M tokens, C width, V vocabulary, B*H attention rows, T sequence)
//   memory      alloc, alloc_host, write, write_tokens, read, read_scalar, synchronize, fill, copy (converting
//               between floating types), axpy, amax
//   operands    quantize / quantize_both / transpose (recipe.hpp's operands of the three GEMMs),
//               copy_amax (the amax an NVFP4 copy's tensor scale comes from),
//               export_fp8 / import_fp8 (the healing stash), make_scaling_table, update_scales
//   GEMM        gemm: D[P,Q] = alpha * A . B^T + beta * C on stored copies A [P,R], B [Q,R]
//   layers      rmsnorm_forward / rmsnorm_quantize / rmsnorm_backward, rope, attention_forward /
//               attention_backward, swiglu_forward / swiglu_quantize / swiglu_backward /
//               swiglu_backward_quantize, embedding_forward / embedding_backward, cross_entropy /
//               cross_entropy_rows (a loss mask; a chunk of rows at a time)
//   optimizer   global_norm (multi-tensor), adamw_step (multi-tensor)
// A step graph (make_step_graph, nn/step_graph.hpp): a backend with launches to save records a
// whole training step once and replays it; train/step_replay.hpp says when.
// Not here: full sharding's gather of quantized weight copies between ranks, a seam of its own
// (parallel/copy_gather.hpp) that a backend implements beside this one and hands out through
// copy_gatherer().
// Stored copies follow mxkit's convention (tensor/mx_tensor.hpp): a rowwise copy of a [rows,
// cols] matrix is stored as is, a columnwise copy transposed, so the reduction axis of every
// GEMM operand is contiguous. This holds for every precision, not only MX.
#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <span>
#include <type_traits>
#include <utility>
#include <vector>

#include <mxkit/block/quantize_options.hpp>
#include <mxkit/checked_arithmetic.hpp>
#include <mxkit/error.hpp>
#include <mxkit/nn/adamw_args.hpp>
#include <mxkit/nn/backend_checks.hpp>
#include <mxkit/nn/backend_counters.hpp>
#include <mxkit/nn/backend_observer.hpp>
#include <mxkit/nn/delayed_scaling.hpp>
#include <mxkit/nn/kernel_args.hpp>
#include <mxkit/gemm/product.hpp>
#include <mxkit/nn/operand.hpp>
#include <mxkit/nn/rope_frequencies.hpp>
#include <mxkit/nn/step_graph.hpp>
#include <mxkit/nn/tensor.hpp>
#include <mxkit/tensor/fp8_tensor.hpp>
#include <mxkit/tensor/mx_tensor.hpp>

MXKIT_BEGIN_NAMESPACE
namespace nn {

class copy_gather;  // parallel/copy_gather.hpp: full sharding's seam, implemented beside this one

class backend {
 public:
  virtual ~backend() = default;
  virtual const char* name() const noexcept = 0;

  // ---- memory and transfers ---------------------------------------------------------------------
  // Zero-filled [rows, cols] of `type` from the stream-ordered pool, counted under `tag`.
  tensor alloc(std::size_t rows, std::size_t cols, dtype type, mem_tag tag) { return allocate(rows, cols, type, tag, true); }
  // The same without the zero fill, for the output of an operation that overwrites all of it
  // (a GEMM with beta = 0 or a separate C, attention, a copy: the operations documented
  // "overwritten"). Its contents are unspecified until then; the host backend fills it with
  // 0xFF bytes (NaN in every float type), so a test that reads it before it is written sees NaN.
  // On the GPU this saves a memset per activation (docs/perf/training.md).
  tensor alloc_uninitialized(std::size_t rows, std::size_t cols, dtype type, mem_tag tag) { return allocate(rows, cols, type, tag, false); }
  // A (1, 1) device scalar (f64: the loss, norms, clip factors, counters).
  tensor scalar(mem_tag tag = mem_tag::activation) { return alloc(1, 1, dtype::f64, tag); }

  // Host values (exact for f32/f64/i32 inputs; bf16 rounds to nearest even) -> backend memory.
  void write(tensor& t, const std::vector<double>& values) {
    detail::require(t.defined(), "write: tensor is not allocated");
    detail::require(values.size() == t.size(), "write: ", values.size(), " values for a ", t.rows(), "x", t.cols(), " tensor");
    ++counters_.uploads;
    observed(backend_op::write, [&] { do_write(t, values); });
  }
  // Token ids (tokens, 1) i32, each checked against [0, vocab) on the host before the upload.
  void write_tokens(tensor& t, const std::vector<std::int32_t>& tokens, std::size_t vocab) {
    require_shape(t, tokens.size(), 1, "write_tokens");
    require_type(t, dtype::i32, "write_tokens");
    for (std::size_t i = 0; i < tokens.size(); ++i)
      detail::require(tokens[i] >= 0 && static_cast<std::size_t>(tokens[i]) < vocab, "token ", i, " is ", tokens[i],
                      ", outside the vocabulary [0, ", vocab, ")");
    ++counters_.uploads;
    observed(backend_op::write_tokens, [&] { do_write_tokens(t, tokens); });
  }
  // Backend memory -> host, as doubles. Waits for the stream: a host read (counted).
  std::vector<double> read(const tensor& t) const {
    detail::require(t.defined(), "read: tensor is not allocated");
    ++counters_.host_reads;
    return observed(backend_op::read, [&] { return do_read(t); });
  }
  double read_scalar(const tensor& t) const {
    require_shape(t, 1, 1, "read_scalar");
    return read(t)[0];
  }
  // Waits until every operation enqueued so far has finished.
  void synchronize() {
    ++counters_.synchronizations;
    do_synchronize();
  }
  void fill(tensor& t, double value) {
    detail::require(t.defined(), "fill: tensor is not allocated");
    observed(backend_op::fill, [&] { do_fill(t, value); });
  }
  // dst = src; between floating types (f32, bf16, f64) converted element by element, as
  // PyTorch's Tensor.copy_ converts: exact where the destination holds the value, else rounded
  // to nearest even to bf16 (bfloat16::from_float; f64 through f32, as nn::element_from_double
  // rounds). The bf16 gradient reduction of data parallelism rounds with it
  // (parallel_config::reduce_dtype). An i32 tensor copies to i32 only.
  void copy(const tensor& src, tensor& dst) {
    require_shape(dst, src.rows(), src.cols(), "copy destination");
    if (!is_floating(dst.type()) || !is_floating(src.type())) require_type(dst, src.type(), "copy destination");
    observed(backend_op::copy, [&] { do_copy(src, dst); });
  }
  // y += alpha * x (same shape and type)
  void axpy(double alpha, const tensor& x, tensor& y) {
    require_shape(y, x.rows(), x.cols(), "axpy y");
    require_type(y, x.type(), "axpy y");
    detail::require(is_floating(x.type()), "axpy: integer tensors");
    observed(backend_op::axpy, [&] { do_axpy(alpha, x, y); });
  }
  // out (1, 1) f64 = max |x| (NaN if any element is NaN)
  void amax(const tensor& x, tensor& out) {
    detail::require(x.defined() && is_floating(x.type()), "amax: needs an allocated floating-point tensor");
    check_scalar(out, "amax output");
    observed(backend_op::amax, [&] { do_amax(x, out); });
  }

  // ---- quantized operands, delayed scaling, GEMM ----------------------------------------------
  // out (1, 1) f32 = the amax the copy `r` asks for of x takes its tensor scale from: for NVFP4
  // (the one format with a tensor scale) the largest finite magnitude among the values the copy
  // quantizes, rotated when r rotates (block/nvfp4_scale.hpp); 0 for an empty x. The maximum over
  // the parts of a tensor is the whole tensor's, for quant_request::tensor_amax.
  void copy_amax(const tensor& x, const quant_request& r, tensor& out) {
    check_quant_input(x, "copy_amax");
    check_request(r, "copy_amax");
    detail::require(has_tensor_scale(r), "copy_amax: ", copy_name(r), " copies have no tensor scale (NVFP4 copies have)");
    require_shape(out, 1, 1, "copy_amax output");
    require_type(out, dtype::f32, "copy_amax output");
    observed(backend_op::copy_amax, [&] { do_copy_amax(x, r, out); });
  }
  qtensor quantize(const tensor& x, const quant_request& r) {
    check_quant_input(x, "quantize");
    check_request(r, "quantize");
    count_copy(r);
    qtensor q = observed(backend_op::quantize, [&] { return do_quantize(x, r); });
    note_amax(r);
    return q;
  }
  // Both copies of one tensor (the fused kernel of a GPU backend); same bytes as two quantize().
  qpair quantize_both(const tensor& x, const quant_request& rowwise, const quant_request& columnwise) {
    check_quant_input(x, "quantize_both");
    check_pair(rowwise, &columnwise, "quantize_both");
    count_copy(rowwise);
    count_copy(columnwise);
    qpair q = observed(backend_op::quantize_both, [&] { return do_quantize_both(x, rowwise, columnwise); });
    note_amax(rowwise);
    note_amax(columnwise);
    return q;
  }
  // Whether a columnwise copy of kind k is its rowwise copy's transpose (transpose()): FP8 (a
  // per-tensor scale) and bf16 (elementwise rounding); an MX copy's blocks run along its axis.
  static constexpr bool columnwise_is_transpose(precision k) noexcept { return k == precision::fp8 || k == precision::bf16; }
  // Columnwise copy of an FP8 or bf16 rowwise copy: the same values transposed (FP8: a byte
  // transpose under the same scale; bf16: a device backend may read the rows MN-major instead).
  qtensor transpose(const qtensor& rowwise, operand_use use, mem_tag tag) {
    detail::require(rowwise.defined() && columnwise_is_transpose(rowwise.kind()) && rowwise.axis() == block_axis::rowwise,
                    "transpose: needs an FP8 or bf16 rowwise copy, got a ", name_of(rowwise.kind()), " ", name_of(rowwise.axis()), " copy");
    ++counters_.quantized[static_cast<std::size_t>(use)];
    return observed(backend_op::transpose, [&] { return do_transpose(rowwise, use, tag); });
  }
  // FP8 copies between backend memory and host memory (the healing stash): quantize_fp8 of `w`
  // with a host scale, returned in the backend's host memory (waits: a host read); and a host
  // FP8 copy uploaded as a rowwise operand.
  host_fp8 export_fp8(const tensor& w, fp8_type type, float scale) {
    check_quant_input(w, "export_fp8");
    detail::require(std::isfinite(scale) && scale > 0.0f, "export_fp8: scale must be finite and positive, got ", scale);
    detail::check_enum(type, fp8_type::e5m2, "fp8_type", "export_fp8");
    ++counters_.host_reads;
    return observed(backend_op::export_fp8, [&] { return do_export_fp8(w, type, scale); });
  }
  qtensor import_fp8(const host_fp8& host, operand_use use, mem_tag tag) {
    detail::check_enum(host.type(), fp8_type::e5m2, "fp8_type", "import_fp8");
    detail::require(host.bytes() == 0 || host.codes() != nullptr, "import_fp8: a ", host.rows(), "x", host.cols(), " copy without codes");
    ++counters_.uploads;
    ++counters_.quantized[static_cast<std::size_t>(use)];
    return observed(backend_op::import_fp8, [&] { return do_import_fp8(host, use, tag); });
  }
  // A plain host tensor (checked: codes that fill rows x cols), through the backend's host memory.
  qtensor import_fp8(const fp8_tensor& t, operand_use use, mem_tag tag) {
    detail::check_fp8_tensor(t, "import_fp8");
    std::shared_ptr<std::uint8_t[]> codes = alloc_host(t.data.size());
    if (!t.data.empty()) std::memcpy(codes.get(), t.data.data(), t.data.size());
    return import_fp8(host_fp8(t.type, t.rows, t.cols, t.scale, t.amax, std::move(codes)), use, tag);
  }
  // Host memory for copies the host keeps for this backend (host_fp8): page-locked on a GPU.
  std::shared_ptr<std::uint8_t[]> alloc_host(std::size_t bytes) { return do_alloc_host(bytes); }
  // A table of `types.size()` FP8 tensors: history zero, scale 1 (nn/delayed_scaling.hpp).
  std::shared_ptr<scaling_table> make_scaling_table(const delayed_scaling_config& config, const std::vector<fp8_type>& types) {
    check_config(config);
    tensor history = alloc(types.size(), config.history_length, dtype::f32, mem_tag::scaling);
    tensor scale = alloc(types.size(), 1, dtype::f32, mem_tag::scaling);
    tensor maxima = alloc(types.size(), 1, dtype::f32, mem_tag::scaling);
    std::vector<double> ones(types.size(), 1.0), m;
    for (fp8_type t : types) m.push_back(fp8_max(t));
    write(scale, ones);
    write(maxima, m);
    return std::make_shared<scaling_table>(config, types, std::move(history), std::move(scale), std::move(maxima));
  }
  // The fused per-step update of every row: new scales from the histories, histories rolled.
  void update_scales(scaling_table& table) {
    observed(backend_op::update_scales, [&] { do_update_scales(table); });
    table.note_update();
  }
  // D = alpha * A . B^T + beta * C; A stored [P,R], B stored [Q,R] (same kind, same R); D [P,Q]
  // f32, bf16 or f64; C (same shape and type as D) is D itself when null (beta = 1 with C = the
  // residual stream is the residual add in the epilogue).
  void gemm(gemm_product kind, const qtensor& a, const qtensor& b, tensor& d, float alpha = 1.0f, float beta = 0.0f,
            const tensor* c = nullptr) {
    detail::require(a.defined() && b.defined(), name_of(kind), ": operand not quantized");
    detail::require(a.kind() == b.kind(), name_of(kind), ": operands are ", name_of(a.kind()), " and ", name_of(b.kind()));
    detail::require(a.length() == b.length(), name_of(kind), ": reduction lengths differ: A stored ", a.lines(), "x", a.length(),
                    ", B stored ", b.lines(), "x", b.length());
    require_shape(d, a.lines(), b.lines(), name_of(kind));
    detail::require(is_floating(d.type()), name_of(kind), ": D is an integer tensor");
    if (c && !c->same_as(d)) {
      require_shape(*c, d.rows(), d.cols(), "gemm C");
      require_type(*c, d.type(), "gemm C");
    } else {
      c = nullptr;
    }
    ++counters_.gemms[static_cast<std::size_t>(kind)];
    observed(backend_op::gemm, [&] { do_gemm(kind, a, b, d, alpha, beta, c); }, static_cast<int>(kind));
  }

  // ---- layer kernels (forward and backward; *_backward kernels add into their outputs where noted)
  // y = x / rms(x) * w; rstd (rows, 1) saved.
  void rmsnorm_forward(const tensor& x, const tensor& w, tensor& y, tensor& rstd, double eps) {
    check_rmsnorm(x, w, rstd);
    require_shape(y, x.rows(), x.cols(), "rmsnorm output");
    require_type(y, x.type(), "rmsnorm output");
    observed(backend_op::rmsnorm_forward, [&] { do_rmsnorm_forward(x, w, y, rstd, eps); });
  }
  // The same normalization writing the consumer's quantized copies directly (y, the output in
  // x's dtype, too when given): the bytes quantize(y) would give.
  qpair rmsnorm_quantize(const tensor& x, const tensor& w, tensor& rstd, double eps, const quant_plan& plan, tensor* y) {
    check_rmsnorm(x, w, rstd);
    check_pair(plan.rowwise, plan.columnwise_wanted ? &plan.columnwise : nullptr, "rmsnorm_quantize");
    if (y) {
      require_shape(*y, x.rows(), x.cols(), "rmsnorm output");
      require_type(*y, x.type(), "rmsnorm output");
    }
    count_plan(plan);
    qpair q = observed(backend_op::rmsnorm_quantize, [&] { return do_rmsnorm_quantize(x, w, rstd, eps, plan, y); });
    note_plan(plan);
    return q;
  }
  // dx += d(loss)/dx; dw += d(loss)/dw (dw null: frozen). With a residual gradient dr,
  // dx = dr + d(loss)/dx instead (dx's values are not read; dr may be dx): the residual
  // stream's gradient and the norm's in one pass, where a copy of dr into dx came first.
  void rmsnorm_backward(const tensor& dy, const tensor& x, const tensor& w, const tensor& rstd, tensor& dx, tensor* dw,
                        const tensor* dr = nullptr) {
    check_rmsnorm(x, w, rstd);
    require_shape(dy, x.rows(), x.cols(), "rmsnorm backward dY");
    require_type(dy, x.type(), "rmsnorm backward dY");
    require_shape(dx, x.rows(), x.cols(), "rmsnorm backward dX");
    require_type(dx, x.type(), "rmsnorm backward dX");
    if (dw) {
      require_shape(*dw, 1, x.cols(), "rmsnorm backward dW");
      require_type(*dw, w.type(), "rmsnorm backward dW");
    }
    if (dr) {
      require_shape(*dr, x.rows(), x.cols(), "rmsnorm backward residual gradient");
      require_type(*dr, x.type(), "rmsnorm backward residual gradient");
    }
    observed(backend_op::rmsnorm_backward, [&] { do_rmsnorm_backward(dy, x, w, rstd, dr ? *dr : dx, dx, dw); });
  }
  // In place on the q and k heads of a qkv tensor; inverse = rotate back (the backward pass). The
  // frequencies: theta, and Llama 3.1's scaling when on (nn/rope_frequencies.hpp).
  void rope(tensor& qkv, const head_shape& s, const rope_frequencies& f, bool inverse) {
    check_heads(s);
    detail::require(s.head_dim % 2 == 0, "rope: head_dim ", s.head_dim, " must be even");
    check_activation(qkv, s.tokens(), s.qkv_dim(), "rope qkv");
    check_config(f);
    observed(backend_op::rope, [&] { do_rope(qkv, s, f, inverse); });
  }
  void rope(tensor& qkv, const head_shape& s, double theta, bool inverse) { rope(qkv, s, rope_frequencies{theta, {}}, inverse); }
  // Causal grouped-query attention; lse (batch*n_heads, seq) log-sum-exp saved, in stat_type.
  void attention_forward(const tensor& qkv, tensor& out, tensor& lse, const head_shape& s) {
    check_heads(s);
    check_activation(qkv, s.tokens(), s.qkv_dim(), "attention qkv");
    check_like(out, qkv, s.tokens(), s.q_dim(), "attention output");
    check_stat(lse, qkv, s.batch * s.n_heads, s.seq, "attention log-sum-exp");
    observed(backend_op::attention_forward, [&] { do_attention_forward(qkv, out, lse, s); });
  }
  // dqkv is overwritten; out and lse are the forward pass's.
  void attention_backward(const tensor& dout, const tensor& qkv, const tensor& out, const tensor& lse, tensor& dqkv,
                          const head_shape& s) {
    check_heads(s);
    check_activation(qkv, s.tokens(), s.qkv_dim(), "attention backward qkv");
    check_like(out, qkv, s.tokens(), s.q_dim(), "attention backward output");
    check_like(dout, qkv, s.tokens(), s.q_dim(), "attention backward dout");
    check_stat(lse, qkv, s.batch * s.n_heads, s.seq, "attention backward log-sum-exp");
    check_like(dqkv, qkv, s.tokens(), s.qkv_dim(), "attention backward dqkv");
    observed(backend_op::attention_backward, [&] { do_attention_backward(dout, qkv, out, lse, dqkv, s); });
  }
  // out = silu(gate) * up, gate_up = [gate | up].
  void swiglu_forward(const tensor& gate_up, tensor& out) {
    check_swiglu(gate_up);
    check_like(out, gate_up, gate_up.rows(), gate_up.cols() / 2, "swiglu output");
    observed(backend_op::swiglu_forward, [&] { do_swiglu_forward(gate_up, out); });
  }
  // The same activation writing the consumer's quantized copies directly (out too when given).
  qpair swiglu_quantize(const tensor& gate_up, const quant_plan& plan, tensor* out) {
    check_swiglu(gate_up);
    check_pair(plan.rowwise, plan.columnwise_wanted ? &plan.columnwise : nullptr, "swiglu_quantize");
    if (out) check_like(*out, gate_up, gate_up.rows(), gate_up.cols() / 2, "swiglu output");
    count_plan(plan);
    qpair q = observed(backend_op::swiglu_quantize, [&] { return do_swiglu_quantize(gate_up, plan, out); });
    note_plan(plan);
    return q;
  }
  // dgate_up is overwritten; it may be gate_up itself (every backend reads an element's gate and
  // up before it writes their gradients, and no element reads another's).
  void swiglu_backward(const tensor& dout, const tensor& gate_up, tensor& dgate_up) {
    check_swiglu(gate_up);
    check_like(dout, gate_up, gate_up.rows(), gate_up.cols() / 2, "swiglu backward dout");
    check_like(dgate_up, gate_up, gate_up.rows(), gate_up.cols(), "swiglu backward dgate_up");
    observed(backend_op::swiglu_backward, [&] { do_swiglu_backward(dout, gate_up, dgate_up); });
  }
  // The plan's copies of the SwiGLU gradient [dg | du] (rows, 2F), byte-identical to quantizing
  // what swiglu_backward stores. Consumes dout and gate_up (both handles are released): both
  // backends write the gradient over gate_up, release dout and quantize the gradient, so neither
  // input is held beside the copies, nor the gradient beside the GEMMs that read them (unless a
  // bf16 copy is gate_up's memory itself). A backend may write the copies from dout and gate_up
  // directly instead.
  qpair swiglu_backward_quantize(tensor& dout, tensor& gate_up, const quant_plan& plan) {
    check_swiglu(gate_up);
    check_like(dout, gate_up, gate_up.rows(), gate_up.cols() / 2, "swiglu backward dout");
    check_pair(plan.rowwise, plan.columnwise_wanted ? &plan.columnwise : nullptr, "swiglu_backward_quantize");
    count_plan(plan);
    qpair q = observed(backend_op::swiglu_backward_quantize, [&] { return do_swiglu_backward_quantize(dout, gate_up, plan); });
    note_plan(plan);
    dout.reset();
    gate_up.reset();
    return q;
  }
  // out[i] = table[tokens[i]] (out in the activation dtype);  dtable[tokens[i]] += dout[i].
  void embedding_forward(const tensor& tokens, const tensor& table, tensor& out) {
    check_tokens(tokens, "embedding tokens");
    check_param(table, "embedding table");
    require_shape(out, tokens.rows(), table.cols(), "embedding output");
    check_activation_of(out, table, "embedding output");
    observed(backend_op::embedding_forward, [&] { do_embedding_forward(tokens, table, out); });
  }
  void embedding_backward(const tensor& tokens, const tensor& dout, tensor& dtable) {
    check_tokens(tokens, "embedding tokens");
    check_param(dtable, "embedding backward dtable");
    require_shape(dout, tokens.rows(), dtable.cols(), "embedding backward dout");
    check_activation_of(dout, dtable, "embedding backward dout");
    observed(backend_op::embedding_backward, [&] { do_embedding_backward(tokens, dout, dtable); });
  }
  // loss (1, 1) f64 = mean cross-entropy of softmax(logits) against targets (rows, 1) i32, over the
  // rows the loss mask (rows, 1) i32 of 0/1 counts (null: every row): sum over the counted rows /
  // max(1, their count) (ref/nn/cross_entropy.hpp). gradient: logits is overwritten with
  // d(loss)/d(logits) (in place: no second (M, V) buffer), zero in the rows that do not count.
  void cross_entropy(tensor& logits, const tensor& targets, tensor& loss, bool gradient, const tensor* mask = nullptr) {
    check_cross_entropy(logits, targets, mask, 0);
    check_scalar(loss, "cross_entropy loss");
    tensor row_loss = alloc_uninitialized(targets.rows(), 1, dtype::f64, mem_tag::activation);  // (each row is written)
    observed(backend_op::cross_entropy, [&] { do_cross_entropy(logits, targets, mask, 0, &row_loss, &loss, gradient); });
  }
  // The same for rows first .. first + logits.rows() - 1 of a batch whose targets and mask are
  // given whole (the head and its loss a chunk of rows at a time: nn/head_loss.hpp). Each row's
  // loss goes to row_loss (batch rows, 1) f64 at its batch row (0 where it does not count); with
  // `loss`, the batch's mean is then formed from all of row_loss (the earlier chunks' rows too), in
  // row order: chunked or not, the same loss and gradient, bit for bit. row_loss may be null when
  // loss is (the gradient only).
  void cross_entropy_rows(tensor& logits, const tensor& targets, const tensor* mask, std::size_t first, tensor* row_loss, tensor* loss,
                          bool gradient) {
    check_cross_entropy(logits, targets, mask, first);
    detail::require(row_loss || !loss, "cross_entropy_rows: the loss is formed from the row losses: give row_loss");
    if (row_loss) {
      require_shape(*row_loss, targets.rows(), 1, "cross_entropy row losses");
      require_type(*row_loss, dtype::f64, "cross_entropy row losses");
    }
    if (loss) check_scalar(*loss, "cross_entropy loss");
    observed(backend_op::cross_entropy, [&] { do_cross_entropy(logits, targets, mask, first, row_loss, loss, gradient); });
  }

  // ---- optimizer (multi-tensor) ------------------------------------------------------------------
  // norm = sqrt(sum of squares of every element of every tensor), clip = max_norm / norm when
  // max_norm > 0 and norm > max_norm, else 1. One pass over all tensors; both (1, 1) f64.
  void global_norm(std::span<const tensor* const> tensors, double max_norm, tensor& norm, tensor& clip) {
    for (const tensor* t : tensors) detail::require(t && t->defined() && is_floating(t->type()), "global_norm: a tensor is not allocated");
    detail::require(max_norm >= 0.0, "global_norm: max_norm must be >= 0, got ", max_norm);
    check_scalar(norm, "global_norm norm");
    check_scalar(clip, "global_norm clip factor");
    observed(backend_op::global_norm, [&] { do_global_norm(tensors, max_norm, norm, clip); });
  }
  // Every slot: g' = g * clip, AdamW with bias correction t = state[0] + 1 (ref/nn/adamw.hpp).
  // A non-finite norm skips the whole step on the device: nothing is written but state[1] += 1;
  // otherwise state[0] += 1. state (1, 2) f64: steps applied, steps skipped.
  void adamw_step(std::span<const adamw_slot_ref> slots, const adamw_args& args, const tensor& norm, const tensor& clip,
                  tensor& state) {
    for (const adamw_slot_ref& s : slots) {
      detail::require(s.param && s.grad && s.m && s.v, "adamw_step: a slot has a null tensor");
      check_param(*s.param, "adamw parameter");
      for (const tensor* t : {s.grad, static_cast<const tensor*>(s.m), static_cast<const tensor*>(s.v)}) {
        require_shape(*t, s.param->rows(), s.param->cols(), "adamw gradient/moment");
        require_type(*t, s.param->type(), "adamw gradient/moment");
      }
    }
    check_scalar(norm, "adamw_step norm");
    check_scalar(clip, "adamw_step clip factor");
    if (args.lr_device) check_scalar(*args.lr_device, "adamw_step learning rate");
    require_shape(state, 1, 2, "adamw_step state");
    require_type(state, dtype::f64, "adamw_step state");
    observed(backend_op::adamw_step, [&] { do_adamw_step(slots, args, norm, clip, state); });
  }

  memory_tracker& memory() noexcept { return memory_; }
  const memory_tracker& memory() const noexcept { return memory_; }
  backend_counters& counters() noexcept { return counters_; }
  const backend_counters& counters() const noexcept { return counters_; }
  // The one seam for cross-cutting work (profiling, tracing, overlap bookkeeping): every public
  // operation's do_*() is bracketed by observer->begin/end. Null (the default) observes nothing.
  // The observer must outlive its installation; set_observer(nullptr) removes it.
  void set_observer(backend_observer* observer) noexcept { observer_ = observer; }
  backend_observer* observer() const noexcept { return observer_; }
  // Full sharding's gather of quantized weight copies (parallel/copy_gather.hpp), where this
  // backend implements it beside this interface (data_parallel.hpp gathers through it). Null, the
  // default: the ranks gather the weights themselves.
  virtual copy_gather* copy_gatherer() noexcept { return nullptr; }
  // A graph to record one training step into and replay it (nn/step_graph.hpp), counted in
  // counters().graph_captures / graph_replays; null where this backend has none (the host
  // backend runs each operation as it is called: there is no launch to save).
  std::unique_ptr<step_graph> make_step_graph() {
    std::unique_ptr<step_graph> g = do_make_step_graph();
    if (g) g->counters_ = &counters_;
    return g;
  }

 protected:
  struct allocation {
    void* data = nullptr;
    std::shared_ptr<void> owner;  // releases the memory to the pool
  };
  // Every do_*() is called only with arguments its public function has checked.
  virtual allocation do_alloc(std::size_t bytes, bool zero_fill) = 0;  // 8-byte aligned at least
  virtual std::unique_ptr<step_graph> do_make_step_graph() { return nullptr; }
  virtual void do_write(tensor& t, const std::vector<double>& values) = 0;
  virtual void do_write_tokens(tensor& t, const std::vector<std::int32_t>& tokens) = 0;
  virtual std::vector<double> do_read(const tensor& t) const = 0;
  virtual void do_synchronize() = 0;
  virtual void do_fill(tensor& t, double value) = 0;
  virtual void do_copy(const tensor& src, tensor& dst) = 0;
  virtual void do_axpy(double alpha, const tensor& x, tensor& y) = 0;
  virtual void do_amax(const tensor& x, tensor& out) = 0;
  virtual void do_copy_amax(const tensor& x, const quant_request& r, tensor& out) = 0;
  virtual qtensor do_quantize(const tensor& x, const quant_request& r) = 0;
  virtual qpair do_quantize_both(const tensor& x, const quant_request& rowwise, const quant_request& columnwise) = 0;
  virtual qtensor do_transpose(const qtensor& rowwise, operand_use use, mem_tag tag) = 0;
  virtual host_fp8 do_export_fp8(const tensor& w, fp8_type type, float scale) = 0;
  virtual qtensor do_import_fp8(const host_fp8& host, operand_use use, mem_tag tag) = 0;
  virtual std::shared_ptr<std::uint8_t[]> do_alloc_host(std::size_t bytes) { return std::shared_ptr<std::uint8_t[]>(new std::uint8_t[bytes]); }
  virtual void do_update_scales(scaling_table& table) = 0;
  virtual void do_gemm(gemm_product kind, const qtensor& a, const qtensor& b, tensor& d, float alpha, float beta, const tensor* c) = 0;
  virtual void do_rmsnorm_forward(const tensor& x, const tensor& w, tensor& y, tensor& rstd, double eps) = 0;
  // The three producers have unfused defaults (below): a backend overrides one only where it
  // fuses it (writes the copies from the kernel's registers); otherwise it inherits "run the
  // operation into scratch, then quantize the plan", which gives the contract's bytes by
  // construction.
  virtual qpair do_rmsnorm_quantize(const tensor& x, const tensor& w, tensor& rstd, double eps, const quant_plan& plan, tensor* y) {
    tensor out = y ? *y : scratch(x.rows(), x.cols(), x.type());
    do_rmsnorm_forward(x, w, out, rstd, eps);
    return quantize_plan(out, plan);
  }
  // dx = dr + d(loss)/dx; dr may be dx.
  virtual void do_rmsnorm_backward(const tensor& dy, const tensor& x, const tensor& w, const tensor& rstd, const tensor& dr, tensor& dx,
                                   tensor* dw) = 0;
  virtual void do_rope(tensor& qkv, const head_shape& s, const rope_frequencies& f, bool inverse) = 0;
  virtual void do_attention_forward(const tensor& qkv, tensor& out, tensor& lse, const head_shape& s) = 0;
  virtual void do_attention_backward(const tensor& dout, const tensor& qkv, const tensor& out, const tensor& lse, tensor& dqkv,
                                     const head_shape& s) = 0;
  virtual void do_swiglu_forward(const tensor& gate_up, tensor& out) = 0;
  virtual qpair do_swiglu_quantize(const tensor& gate_up, const quant_plan& plan, tensor* out) {
    tensor o = out ? *out : scratch(gate_up.rows(), gate_up.cols() / 2, gate_up.type());
    do_swiglu_forward(gate_up, o);
    return quantize_plan(o, plan);
  }
  virtual void do_swiglu_backward(const tensor& dout, const tensor& gate_up, tensor& dgate_up) = 0;
  // The gradient written over gate_up and dout released before the copies are made (a
  // stream-ordered pool reuses its memory for them).
  virtual qpair do_swiglu_backward_quantize(tensor& dout, tensor& gate_up, const quant_plan& plan) {
    do_swiglu_backward(dout, gate_up, gate_up);
    dout.reset();
    return quantize_plan(gate_up, plan);
  }
  virtual void do_embedding_forward(const tensor& tokens, const tensor& table, tensor& out) = 0;
  virtual void do_embedding_backward(const tensor& tokens, const tensor& dout, tensor& dtable) = 0;
  // Rows first .. of the batch (cross_entropy_rows); row_loss null only with loss null.
  virtual void do_cross_entropy(tensor& logits, const tensor& targets, const tensor* mask, std::size_t first, tensor* row_loss, tensor* loss,
                                bool gradient) = 0;
  virtual void do_global_norm(std::span<const tensor* const> tensors, double max_norm, tensor& norm, tensor& clip) = 0;
  virtual void do_adamw_step(std::span<const adamw_slot_ref> slots, const adamw_args& args, const tensor& norm, const tensor& clip,
                             tensor& state) = 0;

  // An untracked temporary from do_alloc (the unfused intermediate of a producer; a fused kernel
  // keeps it in registers). Released with its last handle, in stream order.
  tensor scratch(std::size_t rows, std::size_t cols, dtype type) {
    allocation a = do_alloc(rows * cols * size_of(type), false);
    return tensor(type, rows, cols, a.data, std::move(a.owner));
  }
  // The plan's copies of a stored tensor: both from one read (do_quantize_both) when the
  // columnwise copy is wanted.
  qpair quantize_plan(const tensor& x, const quant_plan& plan) {
    if (plan.columnwise_wanted) return do_quantize_both(x, plan.rowwise, plan.columnwise);
    return {do_quantize(x, plan.rowwise), {}};
  }

  memory_tracker memory_;
  mutable backend_counters counters_;
  backend_observer* observer_ = nullptr;

 private:
  tensor allocate(std::size_t rows, std::size_t cols, dtype type, mem_tag tag, bool zero_fill) {
    // rows * cols * size_of(type) must not wrap around (a small buffer behind a huge shape), and
    // is at most one object's bytes, so a backend's round-up to its alignment cannot wrap either.
    const std::size_t elements = detail::checked_mul({"rows", rows}, {"cols", cols}, "alloc: a ", rows, "x", cols, " ",
                                                     name_of(type), " tensor does not fit in memory");
    const std::size_t bytes = detail::checked_bytes({"rows x cols", elements}, size_of(type), "alloc: a ", rows, "x", cols, " ",
                                                    name_of(type), " tensor does not fit in memory");
    allocation a = observed(backend_op::alloc, [&] { return do_alloc(bytes, zero_fill); });
    struct owner {
      std::shared_ptr<void> memory;
      tracked_bytes tracked;
    };
    auto o = std::make_shared<owner>();
    o->memory = std::move(a.owner);
    o->tracked = tracked_bytes(&memory_, tag, bytes);
    return tensor(type, rows, cols, a.data, std::move(o));
  }
  // Every public operation that passed its checks runs its do_*() through here: counted, and
  // bracketed by the observer's begin/end (an operation that throws gets no end).
  template <class F>
  std::invoke_result_t<F&> observed(backend_op o, F&& run, int product = -1) const {
    ++counters_.calls[static_cast<std::size_t>(o)];
    if (!observer_) return run();
    const backend_event e{o, product};
    observer_->begin(e);
    if constexpr (std::is_void_v<std::invoke_result_t<F&>>) {
      run();
      observer_->end(e);
    } else {
      std::invoke_result_t<F&> r = run();
      observer_->end(e);
      return r;
    }
  }
  void count_copy(const quant_request& r) noexcept { ++counters_.quantized[static_cast<std::size_t>(r.use)]; }
  void count_plan(const quant_plan& p) noexcept {
    count_copy(p.rowwise);
    if (p.columnwise_wanted) count_copy(p.columnwise);
  }
  static void note_amax(const quant_request& r) {
    if (r.spec.kind() == precision::fp8 && r.fp8.record_amax) r.fp8.table->note_amax(r.fp8.row, r.fp8.source);
  }
  static void note_plan(const quant_plan& p) {
    note_amax(p.rowwise);
    if (p.columnwise_wanted) note_amax(p.columnwise);
  }
};

}  // namespace nn
MXKIT_END_NAMESPACE
