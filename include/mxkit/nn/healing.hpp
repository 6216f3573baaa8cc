// SPDX-License-Identifier: Apache-2.0
#pragma once
// The MXFP4 -> FP8 healing transition of the Llama 2 70B LoRA recipe (shared/reference: AMD's
// MLPerf Training v6.0 write-up):
//   1. pre-quantization, on entry to training (prepare_healing): every linear weight is
//      quantized under the MXFP4 recipe, an FP8 E4M3 copy of it is stashed in host memory
//      (backend::export_fp8: page-locked memory on a GPU backend) and the master copy is freed,
//      so the layers hold the MXFP4 copies only (the base weights are frozen: they never change);
//   2. MXFP4 training;
//   3. the switch (heal), in two passes so that the two sets of weights are never co-resident:
//      pass 1 drops every MXFP4 copy (weights and saved operands) and installs the FP8 recipe,
//      whose delayed-scaling state starts fresh; pass 2 uploads the stashed FP8 copies (on a
//      GPU backend on a copy stream ordered after the frees; the dgrad copy is their transpose,
//      made on the device);
//   4. FP8 training for the remaining steps.
// The report gives the backend's resident weight bytes (memory_tracker: parameters plus quantized
// weight copies) before, between and after the passes, their peak, and what the peak would have
// been had the FP8 copies been uploaded before the MXFP4 ones were freed.
#include <cmath>
#include <cstddef>
#include <functional>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include <mxkit/error.hpp>
#include <mxkit/nn/model.hpp>
#include <mxkit/nn/recipe.hpp>
#include <mxkit/tensor/fp8_tensor.hpp>

MXKIT_BEGIN_NAMESPACE
namespace nn {

// FP8 weight copies in host memory, by linear name.
class fp8_weight_stash {
 public:
  struct entry {
    std::string name;
    host_fp8 copy;
  };
  void add(std::string name, host_fp8 copy) { entries_.push_back({std::move(name), std::move(copy)}); }
  const host_fp8& find(const std::string& name) const {
    for (const entry& e : entries_)
      if (e.name == name) return e.copy;
    detail::fail("fp8_weight_stash: no copy of '", name, "'");
  }
  const std::vector<entry>& entries() const noexcept { return entries_; }
  std::size_t bytes() const noexcept {
    std::size_t n = 0;
    for (const entry& e : entries_) n += e.copy.bytes() + sizeof(float);
    return n;
  }

 private:
  std::vector<entry> entries_;
};

// Step 1 for one frozen linear: its FP8 copy into the stash, then its master released (quantized
// under the current recipe first). FP8 scale: fp8_max / amax of the weight (the delayed-scaling
// formula with margin 0 on the weight's own amax). A streamed build (lora_base.hpp) calls it per
// layer as the layer is built; prepare_healing calls it for every linear of a built model.
inline void stash_and_release(backend& be, linear& l, fp8_weight_stash& stash, fp8_type type = fp8_type::e4m3) {
  detail::require(!l.weight().trainable, "prepare_healing: '", l.name(),
                  "' is trainable; healing stashes frozen weights (freeze the model and train LoRA adapters)");
  detail::require(l.has_master(), "prepare_healing: '", l.name(), "' has no master copy to stash");
  tensor amax_scalar = be.scalar();
  be.amax(l.weight().value, amax_scalar);
  const double amax = be.read_scalar(amax_scalar);  // a host read: healing is set up once, not per step
  const double s = amax > 0.0 && std::isfinite(amax) ? fp8_max(type) / amax : 1.0;
  // A tiny amax gives a quotient beyond float (converting it is undefined behaviour): clamp it
  // to the largest float, as delayed scaling does (delayed_scaling.hpp).
  const float scale = s < std::numeric_limits<float>::max() ? static_cast<float>(s) : std::numeric_limits<float>::max();
  stash.add(l.name(), be.export_fp8(l.weight().value, type, scale));
  l.release_master();  // quantizes under the current recipe first, then frees the master
}

// Step 1. The model's linears must be frozen (a LoRA fine-tune): a stashed copy of a weight that
// trains would go stale.
inline fp8_weight_stash prepare_healing(model& m, fp8_type type = fp8_type::e4m3) {
  fp8_weight_stash stash;
  for (linear* l : m.linears()) stash_and_release(m.be(), *l, stash, type);
  return stash;
}

struct healing_report {
  std::size_t weight_bytes_before = 0;   // resident weight bytes at the switch (MXFP4 phase)
  std::size_t weight_bytes_dropped = 0;  // after pass 1: MXFP4 copies freed
  std::size_t weight_bytes_after = 0;    // after pass 2: FP8 copies resident
  std::size_t peak_weight_bytes = 0;     // highest during the switch
  std::size_t co_resident_bytes = 0;     // the peak if FP8 were uploaded before MXFP4 is freed
  std::size_t restored_linears = 0;
  std::size_t stash_bytes = 0;           // host memory held by the stash
};

// Step 3. `target` must read W in FP8 (fprop and dgrad), e.g. recipes::fp8_healing().
// between_passes (when given) runs after pass 1, with no MXFP4 copy left: a benchmark measures
// the device memory there (it may trim the allocator's pool).
inline healing_report heal(model& m, const fp8_weight_stash& stash, const recipe& target,
                           const std::function<void()>& between_passes = {}) {
  check_config(target);
  backend& be = m.be();
  memory_tracker& mem = be.memory();
  healing_report rep;
  rep.stash_bytes = stash.bytes();
  rep.weight_bytes_before = mem.weight_bytes();
  mem.reset_peak();
  // Pass 1: drop every MXFP4 copy, install the FP8 recipe (fresh delayed-scaling state).
  m.set_recipe(target);
  rep.weight_bytes_dropped = mem.weight_bytes();
  if (between_passes) between_passes();
  // Pass 2: upload the stashed copies.
  std::size_t restored_bytes = 0;
  for (linear* l : m.linears()) {
    if (l->has_master()) continue;  // re-quantized from its master at the next forward
    l->restore_fp8(be.import_fp8(stash.find(l->name()), operand_use::fprop_w, mem_tag::quantized_weight));
    restored_bytes += l->cached_rowwise().bytes() + l->cached_columnwise().bytes();
    ++rep.restored_linears;
  }
  rep.weight_bytes_after = mem.weight_bytes();
  rep.peak_weight_bytes = mem.peak_weight_bytes();
  rep.co_resident_bytes = rep.weight_bytes_before + restored_bytes;
  return rep;
}

}  // namespace nn
MXKIT_END_NAMESPACE
