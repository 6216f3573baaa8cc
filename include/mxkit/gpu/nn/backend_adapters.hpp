// SPDX-License-Identifier: Apache-2.0
#pragma once
// What the device backend (gpu/nn/backend.hpp) puts between nn::backend's tensors and the
// kernels' arguments: the element types a kernel is instantiated for, the GEMM's operands read
// from the copies' payloads, and the device descriptor arrays of the multi-tensor kernels.
#include <cstddef>
#include <cstdint>
#include <vector>

#include <mxkit/gpu/platform.hpp>  // first: the vendor runtime before any MXKIT_HD code

#include <mxkit/error.hpp>
#include <mxkit/format/float16.hpp>
#include <mxkit/gpu/gemm/gemm.hpp>
#include <mxkit/gpu/gemm/nvfp4.hpp>
#include <mxkit/gpu/nn/host_transfers.hpp>
#include <mxkit/gpu/nn/operand_payload.hpp>
#include <mxkit/gpu/runtime.hpp>
#include <mxkit/nn/backend.hpp>

MXKIT_BEGIN_NAMESPACE
namespace gpu {
namespace backend_detail {

// ---- element types
// f(float{}) or f(bfloat16{}) for an activation type; f64 models are the host's.
template <class F>
void activation_types(nn::dtype t, const char* what, F&& f) {
  if (t == nn::dtype::f32) f(float{});
  else if (t == nn::dtype::bf16) f(bfloat16{});
  else mxkit::detail::fail("device_backend: ", what, " on ", name_of(t), " data; the device runs f32 and bf16 models (f64 is the host's)");
}
inline void require_activation(const nn::tensor& t, const char* what) {
  activation_types(t.type(), what, [](auto) {});
}
inline void require_param(const nn::tensor& t, const char* what) {
  mxkit::detail::require(t.type() == nn::dtype::f32, "device_backend: ", what, " on ", name_of(t.type()),
                         " tensors; device parameters and gradients are f32");
}
// f(double{}) for f64 too (element-wise operations of the gradient check's scalars).
template <class F>
void visit_float(nn::dtype t, const char* what, F&& f) {
  if (t == nn::dtype::f64) f(double{});
  else activation_types(t, what, f);
}

// ---- GEMM
// D = alpha * A . B^T + beta * C on two copies of the same kind, as gpu/gemm's operands: MX
// codes and row-major scales, NVFP4 ones with their tensor scales read on the device
// (gpu/gemm/nvfp4.hpp), FP8 codes with the descale read from the copy's device scale, bf16 rows
// (MN-major where the copy reads its source in place). C is D where null or beta = 0.
inline void run_gemm(gemm_product kind, const nn::qtensor& a, const nn::qtensor& b, nn::tensor& d, float alpha, float beta,
                     const nn::tensor* c, stream_t s, const gemm_options& options = {}) {
  mxkit::detail::require(d.type() == nn::dtype::f32 || d.type() == nn::dtype::bf16, "device_backend: ", name_of(kind), " output is ",
                         name_of(d.type()), "; the device writes f32 or bf16");
  const gemm_output_desc out{d.data(), c && beta != 0.0f ? c->data() : d.data(), d.cols(), d.cols(), d.type() == nn::dtype::bf16,
                             alpha, beta};
  const device_payload& pa = payload_of(a);
  const device_payload& pb = payload_of(b);
  a.request().spec.visit(nn::overloaded{
      [&](const nn::block_scaled_spec& spec) {
        if (spec.is_nvfp4()) {  // the tensor scales read in the epilogue from the copies' device floats
          auto operand = [](const device_payload& p) {
            return nvfp4_operand{nvfp4_const_view{p.layout, p.nvfp4_opts, p.data, p.scales, scale_layout::row_major, 1.0f, true}, p.tensor_scale};
          };
          const nvfp4_operand na = operand(pa), nb = operand(pb);
          mxkit::detail::check_nvfp4_product(kind, na.copy.layout, nb.copy.layout);
          mxkit::detail::check_nvfp4_rotation(na.copy.options, nb.copy.options, name_of(kind));
          detail::run_nvfp4(na, nb, a.length(), out, s, options);
          return;
        }
        const mx_const_view va{pa.layout, pa.options, pa.data, pa.scales, scale_layout::row_major};
        const mx_const_view vb{pb.layout, pb.options, pb.data, pb.scales, scale_layout::row_major};
        mxkit::detail::check_mx_product(kind, va.layout, vb.layout);
        mxkit::detail::check_rotation(va.options, vb.options, name_of(kind));
        detail::run(make_operand(va), make_operand(vb), out, s, options);
      },
      [&](const nn::fp8_spec&) {
        auto operand = [](const nn::qtensor& q, const device_payload& p) {
          gemm_operand o = make_operand(fp8_view{q.request().spec.fp8().type, q.lines(), q.length(), 1.0f, p.data});
          o.scale = p.fp8_scale;
          return o;
        };
        detail::run(operand(a, pa), operand(b, pb), out, s, options);
      },
      [&](nn::bf16_spec) {
        auto operand = [](const nn::qtensor& q, const device_payload& p) {
          const auto* data = reinterpret_cast<const bfloat16*>(p.data);
          return p.mn_major ? make_operand(matrix_view<const bfloat16>{data, q.length(), q.lines()}, major_order::mn_major)
                            : make_operand(matrix_view<const bfloat16>{data, q.lines(), q.length()});
        };
        detail::run(operand(a, pa), operand(b, pb), out, s, options);
      },
      [&](nn::native_spec) { mxkit::detail::fail("device_backend: ", name_of(kind), " on native operands (the host reference's)"); },
  });
}

// ---- multi-tensor kernels
// A multi-tensor kernel's descriptor array in device memory (the backend's, tag optimizer),
// uploaded again only when the list changes (a model's parameters are the same every step).
template <class D>
class descriptor_list {
 public:
  // A new list is uploaded into a new buffer and `epoch` counts up (a recorded step graph read
  // the old one: gpu/nn/device_step_graph.hpp).
  const D* get(const std::vector<D>& list, nn::backend& be, staging_ring& staging, stream_t s, std::uint64_t& epoch) {
    // Compared member by member (D's operator==), never as bytes: a descriptor's padding is
    // indeterminate, and a list read as changed inside a recorded step would be uploaded there.
    if (list != host_ || !device_.defined()) {
      host_ = list;
      ++epoch;
      device_ = be.alloc(1, list.size() * sizeof(D) / sizeof(double) + 1, nn::dtype::f64, nn::mem_tag::optimizer);
      if (!list.empty()) staging.upload(device_.data(), list.data(), list.size() * sizeof(D), s);
    }
    return static_cast<const D*>(device_.data());
  }

 private:
  std::vector<D> host_;
  nn::tensor device_;
};

}  // namespace backend_detail
}  // namespace gpu
MXKIT_END_NAMESPACE
