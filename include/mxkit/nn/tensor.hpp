// SPDX-License-Identifier: Apache-2.0
#pragma once
// Dense activation/parameter buffers of the nn layer, owned by a backend (nn/backend.hpp). A
// tensor is a shallow handle: row-major [rows, cols] elements of a run-time dtype in the
// backend's memory (host memory for host_backend, device memory for a GPU backend). Layer code
// never dereferences data(); it passes tensors to backend kernels. Copies alias (shared owner).
//
// dtypes: f32 (master weights, gradients, activations by default), bf16 (activations where the
// recipe says so), f64 (the finite-difference gradient check), i32 (tokens and targets).
// Statistics that a kernel saves for backward (RMSNorm's rstd, attention's log-sum-exp) are
// stored in stat_type(activations): f32, or f64 in an f64 model.
//
// memory_tracker counts the live bytes of every backend allocation by what it holds (mem_tag)
// and the peak of each tag, so "weight memory" (parameters plus quantized weight copies) and its
// peak can be reported, e.g. across the MXFP4 -> FP8 healing switch (nn/healing.hpp), and so can
// the activation peak of a step.
#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <type_traits>
#include <utility>

#include <mxkit/config.hpp>
#include <mxkit/enum_names.hpp>
#include <mxkit/error.hpp>
#include <mxkit/format/float16.hpp>

MXKIT_BEGIN_NAMESPACE
namespace nn {

enum class dtype : std::uint8_t { f32, f64, bf16, i32 };

constexpr std::size_t size_of(dtype t) noexcept {
  switch (t) {
    case dtype::f32: return 4;
    case dtype::f64: return 8;
    case dtype::bf16: return 2;
    case dtype::i32: return 4;
  }
  return 0;
}
}  // namespace nn
template <>
struct enum_names<nn::dtype> {
  static constexpr const char* names[] = {"f32", "f64", "bf16", "i32"};
  static constexpr nn::dtype last = nn::dtype::i32;
};
namespace nn {
constexpr bool is_floating(dtype t) noexcept { return t != dtype::i32; }
// Saved statistics (rstd, log-sum-exp) of activations of type t: f32, or f64 in an f64 model.
constexpr dtype stat_type(dtype t) noexcept { return t == dtype::f64 ? dtype::f64 : dtype::f32; }

template <class T>
constexpr dtype dtype_of() noexcept {
  static_assert(std::is_same_v<T, float> || std::is_same_v<T, double> || std::is_same_v<T, bfloat16> ||
                    std::is_same_v<T, std::int32_t>,
                "nn::tensor holds float, double, bfloat16 or int32 elements");
  if constexpr (std::is_same_v<T, float>) return dtype::f32;
  else if constexpr (std::is_same_v<T, double>) return dtype::f64;
  else if constexpr (std::is_same_v<T, bfloat16>) return dtype::bf16;
  else return dtype::i32;
}

// f(T{}) for the element type T of dtype t (float, double, bfloat16, int32).
template <class F>
void visit_dtype(dtype t, F&& f) {
  switch (t) {
    case dtype::f32: f(float{}); break;
    case dtype::f64: f(double{}); break;
    case dtype::bf16: f(bfloat16{}); break;
    case dtype::i32: f(std::int32_t{}); break;
  }
}
// Host values <-> elements, as backend::write and backend::read convert them: exact for f32,
// f64 and i32 values, bf16 rounds to nearest even (Inf and NaN kept).
template <class T>
T element_from_double(double v) {
  if constexpr (std::is_same_v<T, bfloat16>) return bfloat16::from_float(static_cast<float>(v), rounding::nearest_even, overflow::propagate);
  else return static_cast<T>(v);
}
template <class T>
double element_to_double(T v) {
  if constexpr (std::is_same_v<T, bfloat16>) return v.to_float();
  else return static_cast<double>(v);
}

// What an allocation holds. weight memory = parameter + quantized_weight.
enum class mem_tag : std::uint8_t {
  parameter,             // master weights (fp32), LoRA adapters, norms, embeddings
  gradient,              // parameter gradients
  optimizer,             // AdamW moments and the optimizer's device scalars
  activation,            // layer inputs/outputs, saved state, tokens, the loss
  quantized_weight,      // quantized (or bf16-rounded) weight copies cached across forward calls
  quantized_activation,  // operands quantized on the fly
  scaling,               // FP8 delayed scaling: amax histories and scales (nn/delayed_scaling.hpp)
};
inline constexpr std::size_t mem_tag_count = 7;

}  // namespace nn
template <>
struct enum_names<nn::mem_tag> {
  static constexpr const char* names[] = {"parameter",  "gradient",         "optimizer",
                                          "activation", "quantized_weight", "quantized_activation", "scaling"};
  static constexpr nn::mem_tag last = nn::mem_tag::scaling;
};
namespace nn {

class memory_tracker {
 public:
  void add(mem_tag t, std::size_t bytes) noexcept {
    live_[index(t)] += bytes;
    if (live_[index(t)] > peak_[index(t)]) peak_[index(t)] = live_[index(t)];
    if (weight_bytes() > peak_weight_) peak_weight_ = weight_bytes();
    if (total() > peak_total_) {
      peak_total_ = total();
      at_peak_ = live_;
    }
  }
  void remove(mem_tag t, std::size_t bytes) noexcept { live_[index(t)] -= bytes; }

  std::size_t live(mem_tag t) const noexcept { return live_[index(t)]; }
  std::size_t total() const noexcept {
    std::size_t n = 0;
    for (std::size_t b : live_) n += b;
    return n;
  }
  std::size_t weight_bytes() const noexcept { return live(mem_tag::parameter) + live(mem_tag::quantized_weight); }
  // Peaks since the last reset_peak() (or since construction): per tag, of weight_bytes(), of total().
  std::size_t peak(mem_tag t) const noexcept { return peak_[index(t)]; }
  std::size_t peak_weight_bytes() const noexcept { return peak_weight_; }
  std::size_t peak_total() const noexcept { return peak_total_; }
  // What the total's peak was made of: the live bytes of tag t at that moment.
  std::size_t live_at_peak(mem_tag t) const noexcept { return at_peak_[index(t)]; }
  void reset_peak() noexcept {
    peak_ = live_;
    at_peak_ = live_;
    peak_weight_ = weight_bytes();
    peak_total_ = total();
  }

 private:
  static constexpr std::size_t index(mem_tag t) noexcept { return static_cast<std::size_t>(t); }
  std::array<std::size_t, mem_tag_count> live_{}, peak_{}, at_peak_{};
  std::size_t peak_weight_ = 0, peak_total_ = 0;
};

// RAII record of one allocation in a tracker; lives inside the owner of the memory. The tracker
// (the backend) must outlive every tensor it allocated.
class tracked_bytes {
 public:
  tracked_bytes() = default;
  tracked_bytes(memory_tracker* tracker, mem_tag tag, std::size_t bytes) noexcept
      : tracker_(tracker), tag_(tag), bytes_(bytes) {
    if (tracker_) tracker_->add(tag_, bytes_);
  }
  tracked_bytes(const tracked_bytes&) = delete;
  tracked_bytes& operator=(const tracked_bytes&) = delete;
  tracked_bytes(tracked_bytes&& o) noexcept
      : tracker_(std::exchange(o.tracker_, nullptr)), tag_(o.tag_), bytes_(o.bytes_) {}
  tracked_bytes& operator=(tracked_bytes&& o) noexcept {
    if (this != &o) {
      release();
      tracker_ = std::exchange(o.tracker_, nullptr);
      tag_ = o.tag_;
      bytes_ = o.bytes_;
    }
    return *this;
  }
  ~tracked_bytes() { release(); }
  std::size_t bytes() const noexcept { return bytes_; }
  mem_tag tag() const noexcept { return tag_; }

 private:
  void release() noexcept {
    if (tracker_) tracker_->remove(tag_, bytes_);
    tracker_ = nullptr;
  }
  memory_tracker* tracker_ = nullptr;
  mem_tag tag_ = mem_tag::activation;
  std::size_t bytes_ = 0;
};

class tensor {
 public:
  tensor() = default;
  // Backends build tensors; `owner` keeps `data` alive (and its tracked_bytes).
  tensor(dtype type, std::size_t rows, std::size_t cols, void* data, std::shared_ptr<void> owner) noexcept
      : type_(type), rows_(rows), cols_(cols), data_(data), owner_(std::move(owner)) {}

  dtype type() const noexcept { return type_; }
  std::size_t rows() const noexcept { return rows_; }
  std::size_t cols() const noexcept { return cols_; }
  std::size_t size() const noexcept { return rows_ * cols_; }
  std::size_t bytes() const noexcept { return size() * size_of(type_); }
  bool defined() const noexcept { return owner_ != nullptr; }
  void reset() noexcept { *this = tensor{}; }
  // The same memory (a handle copy of the same allocation).
  bool same_as(const tensor& o) const noexcept { return owner_ == o.owner_ && data_ == o.data_; }

  // Backend memory: only the backend that allocated the tensor may dereference it.
  void* data() const noexcept { return data_; }
  template <class T>
  T* as() const {
    constexpr dtype want = dtype_of<T>();
    detail::require(type_ == want, "nn::tensor: element type is ", name_of(type_), ", accessed as ", name_of(want));
    return static_cast<T*>(data_);
  }

 private:
  dtype type_ = dtype::f32;
  std::size_t rows_ = 0, cols_ = 0;
  void* data_ = nullptr;
  std::shared_ptr<void> owner_;
};

// Shape checks shared by the backend's public operations: name the tensor and both shapes.
inline void require_shape(const tensor& t, std::size_t rows, std::size_t cols, const char* what) {
  detail::require(t.defined(), what, ": tensor is not allocated (expected ", rows, "x", cols, ")");
  detail::require(t.rows() == rows && t.cols() == cols, what, ": tensor is ", t.rows(), "x", t.cols(), ", expected ", rows, "x",
                  cols);
}
inline void require_type(const tensor& t, dtype type, const char* what) {
  detail::require(t.type() == type, what, ": element type is ", name_of(t.type()), ", expected ", name_of(type));
}

}  // namespace nn
MXKIT_END_NAMESPACE
