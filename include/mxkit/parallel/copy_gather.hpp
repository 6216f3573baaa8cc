// SPDX-License-Identifier: Apache-2.0
#pragma once
// The seam of full sharding's quantized weight gather (data_parallel.hpp, parallel_config::
// gather_quantized): a backend that can send its quantized copies as bytes and assemble a whole
// copy from the ranks' slabs implements copy_gather beside nn::backend (ref::host_backend in
// host/host_backend.hpp, gpu::device_backend in gpu/nn/backend.hpp) and hands it out through
// nn::backend::copy_gatherer(); data_parallel reaches it there. Apart from nn::backend: that
// interface computes on one device, moving copies between ranks is the parallelism's concern, and
// nn/ includes nothing of parallel/. As nn::backend does, the public non-virtual calls check once
// and call the protected do_*() hooks.
//
// A weight's copies from the ranks' slabs of rows: each rank quantizes its slab
// (backend::quantize/quantize_both on its rows), packs the copy into a wire buffer of bytes the
// ranks all-gather, and every rank assembles the whole copy from the slabs. The wire format of a
// copy of a [rows, cols] slab is backend-neutral: its stored codes (lines x length, packed as
// block_layout), then its E8M0 or E4M3 scales (lines x blocks per line), then NVFP4's fp32 tensor
// scale (4 bytes, as the host stores a float). An NVFP4 tensor scale comes from the amax of the
// whole copy (arXiv 2509.25149), so each rank quantizes its slab with the whole weight's amax
// (quant_request::tensor_amax, the MAX over the ranks of backend::copy_amax): every slab then
// carries the same tensor scale and the whole copy's scales and codes. An FP8 copy sends its codes
// only: its scale is the table's, the same on every rank; a bf16 copy its values (2 bytes each, as
// stored). FP8 and bf16 copies travel rowwise: their columnwise copy is the rowwise one's
// transpose (backend::transpose). Slabs are whole 32-row blocks (but the last), so every block of
// either copy is quantized from the values the whole weight's quantizer reads: the assembled copy
// is the bytes quantizing the gathered weight gives, for round-to-nearest (stochastic rounding
// draws by element index, which a slab's quantizer does not know; bf16's rounding is elementwise,
// so any rows would do). A backend that cannot assemble copies says so (no copy_gatherer(), or
// gathers_copies() false): the ranks then gather the weights.
#include <cstddef>
#include <cstdint>
#include <span>

#include <mxkit/block/mx_format.hpp>
#include <mxkit/error.hpp>
#include <mxkit/nn/backend.hpp>
#include <mxkit/nn/backend_checks.hpp>
#include <mxkit/nn/operand.hpp>
#include <mxkit/nn/tensor.hpp>
#include <mxkit/tensor/mx_tensor.hpp>

MXKIT_BEGIN_NAMESPACE
namespace nn {

// Where one rank's slab of a copy lies in a wire buffer of gathered copies (copy_gather::assemble_copy):
// rows [first_row, first_row + rows) of the whole copy, at byte_offset.
struct copy_slab {
  std::size_t byte_offset = 0;
  std::size_t first_row = 0, rows = 0;
};

class copy_gather {
 public:
  virtual ~copy_gather() = default;
  // The backend's name for the messages: a backend's one name() override serves nn::backend's too.
  virtual const char* name() const noexcept = 0;

  static constexpr bool copy_travels(precision k) noexcept { return k == precision::mx || backend::columnwise_is_transpose(k); }
  // Bytes of one element of a copy that travels as whole elements (FP8, bf16); 0 for MX.
  static constexpr std::size_t copy_element_bytes(precision k) noexcept {
    return k == precision::fp8 ? 1 : k == precision::bf16 ? sizeof(std::uint16_t) : 0;
  }
  static std::size_t copy_wire_bytes(const quant_request& r, std::size_t rows, std::size_t cols) {
    detail::require(copy_travels(r.spec.kind()), "copy_wire_bytes: only FP8, bf16 and MX copies travel, got a ", name_of(r.spec.kind()),
                    " copy (native operands are gathered as the weights)");
    if (r.spec.kind() != precision::mx) return rows * cols * copy_element_bytes(r.spec.kind());
    const block_layout l{r.spec.block_scaled().format, r.axis, rows, cols};
    return l.data_bytes() + l.scale_count() + (r.spec.block_scaled().is_nvfp4() ? sizeof(float) : 0);
  }
  bool gathers_copies() const noexcept { return do_gathers_copies(); }
  // q's wire bytes at wire's byte `byte_offset` (wire: any tensor, read as bytes).
  void pack_copy(const qtensor& q, tensor& wire, std::size_t byte_offset) {
    detail::require(gathers_copies(), "pack_copy: backend '", name(), "' does not gather quantized copies");
    detail::require(q.defined(), "pack_copy: the copy is not defined");
    detail::require(copy_travels(q.kind()), "pack_copy: needs an FP8, bf16 or MX copy, got a ", name_of(q.kind()), " copy");
    detail::require(!backend::columnwise_is_transpose(q.kind()) || q.axis() == block_axis::rowwise, "pack_copy: ", name_of(q.kind()),
                    " copies travel rowwise (the columnwise copy is the transpose), got a columnwise one");
    detail::require(!has_tensor_scale(q.request()) || q.request().tensor_amax.defined(), "pack_copy: an ", copy_name(q.request()),
                    " slab quantized with its own tensor scale; slabs of a whole copy take the whole tensor's amax (quant_request::tensor_amax)");
    const std::size_t n = copy_wire_bytes(q.request(), q.rows(), q.cols());
    detail::require(wire.defined() && byte_offset <= wire.bytes() && n <= wire.bytes() - byte_offset, "pack_copy: ", n, " bytes at ",
                    byte_offset, " do not fit a wire of ", wire.bytes());
    do_pack_copy(q, wire, byte_offset);
  }
  // The whole [rows, cols] copy `r` asks for, from slabs covering rows 0 .. rows in order, each
  // packed by pack_copy (slabs of MX columnwise copies hold multiples of 32 rows, but the last).
  qtensor assemble_copy(const quant_request& r, std::size_t rows, std::size_t cols, const tensor& wire, std::span<const copy_slab> slabs) {
    detail::require(gathers_copies(), "assemble_copy: backend '", name(), "' does not gather quantized copies");
    check_request(r, "assemble_copy");
    detail::require(copy_travels(r.spec.kind()), "assemble_copy: only FP8, bf16 and MX copies travel, got a ", name_of(r.spec.kind()), " request");
    detail::require(!backend::columnwise_is_transpose(r.spec.kind()) || r.axis == block_axis::rowwise, "assemble_copy: ", name_of(r.spec.kind()),
                    " copies are assembled rowwise (the columnwise copy is the transpose)");
    std::size_t next = 0;
    for (const copy_slab& s : slabs) {
      detail::require(s.first_row == next && s.rows > 0, "assemble_copy: slabs must cover the rows in order, one starts at row ",
                      s.first_row, " where row ", next, " is next");
      if (r.spec.is<block_scaled_spec>()) {  // a block's rows lie in one slab: a columnwise block's, a 2-D tile's
        const block_format& f = r.spec.block_scaled().format;
        const int k = r.axis == block_axis::columnwise ? f.block_size() : f.block.rows;
        detail::require(s.first_row % static_cast<std::size_t>(k) == 0, "assemble_copy: a ", name_of(r.axis), " ", format_name(f), " slab starts at row ",
                        s.first_row, ", not a multiple of ", k);
      }
      const std::size_t n = copy_wire_bytes(r, s.rows, cols);
      detail::require(wire.defined() && s.byte_offset <= wire.bytes() && n <= wire.bytes() - s.byte_offset, "assemble_copy: ", n,
                      " bytes at ", s.byte_offset, " do not fit a wire of ", wire.bytes());
      next += s.rows;
    }
    detail::require(next == rows && rows > 0 && cols > 0, "assemble_copy: slabs cover ", next, " of ", rows, " rows");
    return do_assemble_copy(r, rows, cols, wire, slabs);
  }

 protected:
  // A backend that gathers copies overrides all three (the public calls check gathers_copies()).
  virtual bool do_gathers_copies() const noexcept { return false; }
  virtual void do_pack_copy(const qtensor&, tensor&, std::size_t) {
    detail::fail("pack_copy: backend '", name(), "' says it gathers copies but has no do_pack_copy");
  }
  virtual qtensor do_assemble_copy(const quant_request&, std::size_t, std::size_t, const tensor&, std::span<const copy_slab>) {
    detail::fail("assemble_copy: backend '", name(), "' says it gathers copies but has no do_assemble_copy");
  }
};

}  // namespace nn
MXKIT_END_NAMESPACE
