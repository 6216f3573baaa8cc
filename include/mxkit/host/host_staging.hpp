// SPDX-License-Identifier: Apache-2.0
#pragma once
// How ref::host_backend (host/host_backend.hpp) hands tensors of any element type to the float
// and double reference kernels of ref/nn/: the arithmetic type of a kernel (compute), typed
// pointers (visit), bf16 tensors widened to float for a kernel and rounded back to bf16 (RNE)
// on store (staging), a float copy of any floating tensor (floats), and the stored copy of a
// row-major matrix (stored_copy). Apart from the backend: this is element-type plumbing, the
// backend is the operations; the backend derives from host_staging (privately) for them.
#include <cstddef>
#include <deque>
#include <type_traits>
#include <utility>
#include <vector>

#include <mxkit/format/float16.hpp>
#include <mxkit/format/rounding.hpp>
#include <mxkit/nn/tensor.hpp>
#include <mxkit/tensor/mx_tensor.hpp>  // block_axis

MXKIT_BEGIN_NAMESPACE
namespace ref {

class host_staging {
 protected:
  // Calls f(float{}) for f32/bf16 data, f(double{}) for f64 (the arithmetic type of a kernel).
  template <class F>
  static void compute(nn::dtype t, F&& f) {
    if (t == nn::dtype::f64) f(double{});
    else f(float{});
  }
  // Calls f(typed pointer) for the tensor's element type.
  template <class Tensor, class F>
  static void visit(Tensor& t, F&& f) {
    constexpr bool is_const = std::is_const_v<Tensor>;
    auto call = [&](auto z) {
      using T = decltype(z);
      using P = std::conditional_t<is_const, const T*, T*>;
      f(static_cast<P>(t.template as<T>()));
    };
    nn::visit_dtype(t.type(), call);
  }

  // Kernel arguments of arithmetic type T: f32/f64 tensors of that type directly, bf16 tensors
  // widened into buffers; out() buffers are rounded back (RNE) by commit().
  template <class T>
  class staging {
   public:
    const T* in(const nn::tensor& t) {
      if (t.type() == nn::dtype_of<T>()) return t.as<T>();
      return widen(t).data();
    }
    T* out(nn::tensor& t, bool load) {
      if (t.type() == nn::dtype_of<T>()) return t.as<T>();
      std::vector<T>& b = load ? widen(t) : buffers_.emplace_back(t.size());
      outs_.emplace_back(&t, &b);
      return b.data();
    }
    void commit() {
      for (auto& [t, b] : outs_) {
        bfloat16* d = t->template as<bfloat16>();
        for (std::size_t i = 0; i < b->size(); ++i) d[i] = bfloat16::from_float(static_cast<float>((*b)[i]), rounding::nearest_even, overflow::propagate);
      }
    }

   private:
    std::vector<T>& widen(const nn::tensor& t) {
      const bfloat16* s = t.as<bfloat16>();  // f32 <-> f64 never mix (the public checks)
      std::vector<T>& b = buffers_.emplace_back(t.size());
      for (std::size_t i = 0; i < b.size(); ++i) b[i] = static_cast<T>(s[i].to_float());
      return b;
    }
    std::deque<std::vector<T>> buffers_;
    std::vector<std::pair<nn::tensor*, std::vector<T>*>> outs_;
  };

  // A float copy of any floating tensor (f64 rounds; bf16 widens exactly), or its own f32 data.
  class floats {
   public:
    explicit floats(const nn::tensor& t) {
      if (t.type() == nn::dtype::f32) {
        data_ = t.as<float>();
        return;
      }
      copy_.resize(t.size());
      if (t.type() == nn::dtype::f64)
        for (std::size_t i = 0; i < copy_.size(); ++i) copy_[i] = static_cast<float>(t.as<double>()[i]);
      else
        for (std::size_t i = 0; i < copy_.size(); ++i) copy_[i] = t.as<bfloat16>()[i].to_float();
      data_ = copy_.data();
    }
    const float* data() const noexcept { return data_; }

   private:
    const float* data_ = nullptr;
    std::vector<float> copy_;
  };
  // bf16 values widened to float (exact).
  static std::vector<float> widen(const std::vector<bfloat16>& v) {
    std::vector<float> out(v.size());
    for (std::size_t i = 0; i < v.size(); ++i) out[i] = v[i].to_float();
    return out;
  }
  // The stored [lines, length] copy of a row-major [rows, cols] matrix (transposed when columnwise).
  template <class U, class T, class F>
  static std::vector<U> stored_copy(const T* x, std::size_t rows, std::size_t cols, block_axis axis, F&& convert) {
    std::vector<U> out(rows * cols);
    for (std::size_t r = 0; r < rows; ++r)
      for (std::size_t c = 0; c < cols; ++c)
        out[axis == block_axis::rowwise ? r * cols + c : c * rows + r] = convert(x[r * cols + c]);
    return out;
  }
};

}  // namespace ref
MXKIT_END_NAMESPACE
