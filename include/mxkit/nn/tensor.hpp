#pragma once
// Dense activation/parameter buffers of the nn layer, owned by a backend (nn/backend.hpp). A
// tensor is a shallow handle: row-major [rows, cols] elements of a run-time dtype in the
// backend's memory (host memory for host_backend, device memory for a GPU backend). Layer code
// never dereferences data(); it passes tensors to backend kernels. Copies alias (shared owner).
//
// memory_tracker counts the live bytes of every backend allocation by what it holds (mem_tag),
// so "weight memory" (parameters plus quantized weight copies) and its peak can be reported,
// e.g. across the MXFP4 -> FP8 healing switch (nn/healing.hpp).
#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <utility>

#include <mxkit/config.hpp>
#include <mxkit/enum_names.hpp>
#include <mxkit/error.hpp>

MXKIT_BEGIN_NAMESPACE
namespace nn {

// fp32 is the training dtype; fp64 exists for the finite-difference gradient check.
enum class dtype : std::uint8_t { f32, f64 };

constexpr std::size_t size_of(dtype t) noexcept { return t == dtype::f32 ? 4 : 8; }
}  // namespace nn
template <>
struct enum_names<nn::dtype> {
  static constexpr const char* names[] = {"f32", "f64"};
  static constexpr nn::dtype last = nn::dtype::f64;
};
namespace nn {

// What an allocation holds. weight memory = parameter + quantized_weight.
enum class mem_tag : std::uint8_t {
  parameter,             // master weights (fp32), LoRA adapters, norms, embeddings
  gradient,              // parameter gradients
  optimizer,             // AdamW moments
  activation,            // layer inputs/outputs and saved state
  quantized_weight,      // quantized (or bf16-rounded) weight copies cached across forward calls
  quantized_activation,  // operands quantized on the fly
};
inline constexpr std::size_t mem_tag_count = 6;

}  // namespace nn
template <>
struct enum_names<nn::mem_tag> {
  static constexpr const char* names[] = {"parameter",  "gradient",         "optimizer",
                                          "activation", "quantized_weight", "quantized_activation"};
  static constexpr nn::mem_tag last = nn::mem_tag::quantized_activation;
};
namespace nn {

class memory_tracker {
 public:
  void add(mem_tag t, std::size_t bytes) noexcept {
    live_[index(t)] += bytes;
    if (weight_bytes() > peak_weight_) peak_weight_ = weight_bytes();
  }
  void remove(mem_tag t, std::size_t bytes) noexcept { live_[index(t)] -= bytes; }

  std::size_t live(mem_tag t) const noexcept { return live_[index(t)]; }
  std::size_t weight_bytes() const noexcept { return live(mem_tag::parameter) + live(mem_tag::quantized_weight); }
  // Highest weight_bytes() since the last reset_peak() (or since construction).
  std::size_t peak_weight_bytes() const noexcept { return peak_weight_; }
  void reset_peak() noexcept { peak_weight_ = weight_bytes(); }

 private:
  static constexpr std::size_t index(mem_tag t) noexcept { return static_cast<std::size_t>(t); }
  std::array<std::size_t, mem_tag_count> live_{};
  std::size_t peak_weight_ = 0;
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

  // Backend memory: only the backend that allocated the tensor may dereference it.
  void* data() const noexcept { return data_; }
  template <class T>
  T* as() const {
    constexpr dtype want = sizeof(T) == 4 ? dtype::f32 : dtype::f64;
    detail::require(type_ == want, "nn::tensor: element type is ", name_of(type_), ", accessed as ", name_of(want));
    return static_cast<T*>(data_);
  }

 private:
  dtype type_ = dtype::f32;
  std::size_t rows_ = 0, cols_ = 0;
  void* data_ = nullptr;
  std::shared_ptr<void> owner_;
};

// Shape checks shared by layers and backends: name the tensor and both shapes.
inline void require_shape(const tensor& t, std::size_t rows, std::size_t cols, const char* what) {
  detail::require(t.defined(), what, ": tensor is not allocated (expected ", rows, "x", cols, ")");
  detail::require(t.rows() == rows && t.cols() == cols, what, ": tensor is ", t.rows(), "x", t.cols(), ", expected ", rows, "x",
                  cols);
}

}  // namespace nn
MXKIT_END_NAMESPACE
