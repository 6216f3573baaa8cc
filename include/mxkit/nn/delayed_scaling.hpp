// SPDX-License-Identifier: Apache-2.0
#pragma once
// FP8 delayed scaling (Micikevicius et al. 2022, "FP8 Formats for Deep Learning"; the rule of
// TransformerEngine's DelayedScaling recipe), with the state in backend memory as
// TransformerEngine keeps it: per FP8 tensor of a linear layer (input X, weight W, output
// gradient dY) an amax history and a scale, packed for every FP8 tensor of a model in one
// scaling_table:
//   history (rows, H) f32   column 0 is the step in progress, column k the step k steps before
//   scale   (rows, 1) f32   the scale every cast of the tensor reads in this step
//   fp8_max (rows, 1) f32   448 (E4M3) or 57344 (E5M2), written once
// The scale used in step t comes from steps before t:
//   cast          (backend::quantize with a training request) reads scale[row] through a pointer
//                 and max-combines the input's amax into history[row, 0] (NaN wins)
//   update_scales (backend::update_scales, one fused kernel per step, after the optimizer) for
//                 every row: amax_w = max of the row's window (`max`) or history[row, 0]
//                 (`most_recent`); scale = fp8_max / 2^margin / amax_w (the largest float if that
//                 overflows); then the window rolls by one step and column 0 becomes 0.
// A zero or non-finite amax_w keeps the previous scale (nothing was seen, or an overflow that a
// new scale would not fix). The first step runs with scale 1. The host reference of the update is
// ref::update_scales (ref/nn/delayed_scaling.hpp).
//
// The host never reads a scale. It keeps bookkeeping instead: which tensor each recorded amax came
// from (a weight's value version, or "volatile" for activations and gradients). A row's scale can
// move in an update only if the set of sources that decide it changed, so version(row) counts the
// updates where it may have; a cached weight copy is keyed by (weight version, scale version), not
// by comparing floats (nn/linear.hpp).
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <map>
#include <memory>
#include <utility>
#include <vector>

#include <mxkit/error.hpp>
#include <mxkit/nn/tensor.hpp>
#include <mxkit/tensor/fp8_tensor.hpp>

MXKIT_BEGIN_NAMESPACE
namespace nn {

enum class amax_algorithm : std::uint8_t { max, most_recent };

}  // namespace nn
template <>
struct enum_names<nn::amax_algorithm> {
  static constexpr const char* names[] = {"max", "most_recent"};
  static constexpr nn::amax_algorithm last = nn::amax_algorithm::most_recent;
};
namespace nn {

struct delayed_scaling_config {
  std::size_t history_length = 1024;  // TransformerEngine's default
  amax_algorithm algorithm = amax_algorithm::max;
  int margin = 0;  // scale is divided by 2^margin: headroom for growth between updates
};

inline void check_config(const delayed_scaling_config& c) {
  detail::require(c.history_length >= 1, "delayed scaling: history_length must be at least 1, got ", c.history_length);
  detail::require(c.margin >= 0 && c.margin <= 64, "delayed scaling: margin must be in [0, 64], got ", c.margin);
}

// The delayed-scaling state of a set of FP8 tensors in backend memory (made by
// backend::make_scaling_table), plus the host's bookkeeping of where each amax came from.
class scaling_table {
 public:
  static constexpr std::uint64_t no_source = 0;
  static constexpr std::uint64_t volatile_source = ~std::uint64_t{0};  // a new tensor every cast

  scaling_table(const delayed_scaling_config& config, std::vector<fp8_type> types, tensor history, tensor scale, tensor fp8_max)
      : config_(config), types_(std::move(types)), history_(std::move(history)), scale_(std::move(scale)),
        fp8_max_(std::move(fp8_max)) {
    check_config(config_);
    require_shape(history_, types_.size(), config_.history_length, "scaling table history");
    require_shape(scale_, types_.size(), 1, "scaling table scale");
    require_shape(fp8_max_, types_.size(), 1, "scaling table fp8_max");
    for (const tensor* t : {&history_, &scale_, &fp8_max_}) require_type(*t, dtype::f32, "scaling table");
    rows_.resize(types_.size());
    for (row_book& r : rows_) r.slots.assign(config_.history_length, no_source);
  }

  const delayed_scaling_config& config() const noexcept { return config_; }
  std::size_t rows() const noexcept { return types_.size(); }
  fp8_type type(std::size_t row) const { return types_.at(row); }
  tensor& history() noexcept { return history_; }
  tensor& scale() noexcept { return scale_; }
  tensor& fp8_max() noexcept { return fp8_max_; }
  const tensor& history() const noexcept { return history_; }
  const tensor& scale() const noexcept { return scale_; }
  const tensor& fp8_max() const noexcept { return fp8_max_; }

  // ---- host bookkeeping (no backend memory is read)
  // Updates so far in which scale[row] may have moved.
  std::uint64_t version(std::size_t row) const { return rows_.at(row).version; }
  std::uint64_t updates() const noexcept { return updates_; }
  // A cast recorded an amax of `source` into history[row, 0] (called by backend::quantize).
  void note_amax(std::size_t row, std::uint64_t source) {
    row_book& r = rows_.at(row);
    std::uint64_t& slot = r.slots[r.head];
    if (slot != source) {
      if (slot != no_source) remove(r, slot);
      slot = slot == no_source ? source : volatile_source;
      r.window[slot] += 1;
    }
  }
  // The fused update ran (called by backend::update_scales): versions, then the window rolls.
  void note_update() {
    ++updates_;
    for (row_book& r : rows_) {
      std::vector<std::uint64_t> deciding;  // the sources the new scale is computed from
      if (config_.algorithm == amax_algorithm::max) {
        for (const auto& [source, count] : r.window) deciding.push_back(source);
      } else if (r.slots[r.head] != no_source) {
        deciding.push_back(r.slots[r.head]);
      }
      const bool may_move = !deciding.empty() && (deciding != r.deciding || deciding.back() == volatile_source);
      if (may_move) {
        ++r.version;
        r.deciding = std::move(deciding);
      }
      r.head = (r.head + r.slots.size() - 1) % r.slots.size();  // the oldest slot becomes column 0
      if (r.slots[r.head] != no_source) remove(r, r.slots[r.head]);
      r.slots[r.head] = no_source;
    }
  }

 private:
  struct row_book {
    std::vector<std::uint64_t> slots;                // source of each history column (ring, head = column 0)
    std::size_t head = 0;
    std::map<std::uint64_t, std::size_t> window;     // sources in the window, counted
    std::vector<std::uint64_t> deciding;             // the sources of the last update that moved the scale
    std::uint64_t version = 0;
  };
  static void remove(row_book& r, std::uint64_t source) {
    auto it = r.window.find(source);
    if (it != r.window.end() && --it->second == 0) r.window.erase(it);
  }

  delayed_scaling_config config_;
  std::vector<fp8_type> types_;
  tensor history_, scale_, fp8_max_;
  std::vector<row_book> rows_;
  std::uint64_t updates_ = 0;
};

// One FP8 tensor's row of a table, as a quantization request names it.
struct fp8_scaling_slot {
  scaling_table* table = nullptr;
  std::size_t row = 0;
  bool record_amax = false;                                 // training: the cast writes its amax
  std::uint64_t source = scaling_table::volatile_source;    // what it is the amax of (weight version + 1)
};

}  // namespace nn
MXKIT_END_NAMESPACE
