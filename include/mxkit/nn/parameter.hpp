// SPDX-License-Identifier: Apache-2.0
#pragma once
// A trainable (or frozen) tensor of the model with its gradient and a version counter. The
// optimizer bumps `version` whenever it writes `value`: a quantized copy made from an older
// version is stale (linear.hpp caches weight copies per version).
//
// Initial values are counter-based: element i of a parameter's N(0, stddev) fill is a function of
// (seed, stream, i) only (normal_values: one Philox block per pair of elements), so any element
// range can be made on its own, by any number of threads, with the bits of the whole fill. A
// parameter records how it was filled (parameter_init); a model built with deferred memory
// (model_build_hooks::defer_memory) holds shapes and initializers only, and data_parallel.hpp
// allocates and fills what each rank keeps (a fully sharded rank: its shard only).
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <mxkit/error.hpp>
#include <mxkit/nn/backend.hpp>
#include <mxkit/random/philox.hpp>

MXKIT_BEGIN_NAMESPACE
namespace nn {

// How a parameter's initial values are made: N(0, value) from Philox (seed, stream), or every
// element `value`; `none` where its values came from elsewhere (a hook, a checkpoint).
struct parameter_init {
  enum class kind : std::uint8_t { none, normal, constant };
  kind how = kind::none;
  std::uint64_t seed = 0;
  std::uint32_t stream = 0;
  double value = 0.0;  // normal: the standard deviation; constant: the value

  static parameter_init normal(std::uint64_t seed, std::uint32_t stream, double stddev) noexcept {
    return {kind::normal, seed, stream, stddev};
  }
  static parameter_init constant(double v) noexcept { return {kind::constant, 0, 0, v}; }
};

struct parameter {
  std::string name;
  tensor value;                // fp32 master weights (f64 in the gradient check)
  tensor grad;                 // same shape; allocated only while trainable
  std::uint64_t version = 0;   // bumped by every optimizer update of `value`
  bool trainable = true;
  bool decay = true;           // AdamW weight decay applies (not to norm gains)
  // zero_grad's mark: `grad` reads as zeros but was not written. The first product that adds to
  // it then overwrites it instead (grad_beta), so a step writes each weight gradient once, where
  // a fill followed by accumulating GEMMs writes it twice and reads it once (torch's
  // zero_grad(set_to_none=True) saves the same passes). Whatever else reads or adds to `grad`
  // calls materialize_grad first; code that writes `grad` itself after zero_grad clears the mark.
  bool grad_is_zero = false;
  parameter_init init;         // how `value` was (or, deferred, is to be) initialized

  std::size_t rows() const noexcept { return value.rows(); }
  std::size_t cols() const noexcept { return value.cols(); }
  // Built with deferred memory and not yet allocated: `value` is a shape without memory.
  bool deferred() const noexcept { return !value.defined() && value.size() != 0; }
};

// Elements [offset, offset + rows cols) of `base` as a (rows, cols) tensor sharing its memory (the
// view keeps the allocation alive).
inline tensor view_of(const tensor& base, std::size_t offset, std::size_t rows, std::size_t cols) {
  detail::require(base.defined() && offset <= base.size() && rows * cols <= base.size() - offset, "view_of: ", rows, "x", cols,
                  " at ", offset, " does not fit a tensor of ", base.size(), " elements");
  auto keep = std::make_shared<tensor>(base);
  return tensor(base.type(), rows, cols, static_cast<char*>(base.data()) + offset * size_of(base.type()), std::move(keep));
}

// While one is alive on a thread (a model built with model_build_hooks::defer_memory),
// make_parameter gives a parameter its shape and no memory.
class deferred_parameter_scope {
 public:
  explicit deferred_parameter_scope(bool on) noexcept : was_(flag()) { flag() = on || was_; }
  ~deferred_parameter_scope() { flag() = was_; }
  deferred_parameter_scope(const deferred_parameter_scope&) = delete;
  deferred_parameter_scope& operator=(const deferred_parameter_scope&) = delete;
  static bool active() noexcept { return flag(); }

 private:
  static bool& flag() noexcept {
    static thread_local bool on = false;
    return on;
  }
  bool was_;
};

// The beta of a GEMM that adds its product to p.grad: 0 (overwrite) while p.grad only reads as
// zeros, else 1. Either way p.grad holds written values afterwards.
inline float grad_beta(parameter& p) noexcept {
  const float beta = p.grad_is_zero ? 0.0f : 1.0f;
  p.grad_is_zero = false;
  return beta;
}

// Writes the zeros zero_grad left pending, before an operation that reads p.grad or adds to it
// in place (the optimizer, the norm and embedding gradients).
inline void materialize_grad(backend& be, parameter& p) {
  if (!p.grad_is_zero) return;
  be.fill(p.grad, 0.0);
  p.grad_is_zero = false;
}

// zero_grad for a set of parameters: marks every trainable gradient as zeros (nothing is written).
inline void mark_grads_zero(const std::vector<parameter*>& params) noexcept {
  for (parameter* p : params)
    if (p->trainable) p->grad_is_zero = true;
}

inline parameter make_parameter(backend& be, std::string name, std::size_t rows, std::size_t cols, dtype type, bool decay = true) {
  parameter p;
  p.name = std::move(name);
  p.decay = decay;
  if (deferred_parameter_scope::active()) {  // the shape only: allocate_deferred or data_parallel.hpp gives it memory
    p.value = tensor(type, rows, cols, nullptr, nullptr);
    return p;
  }
  p.value = be.alloc(rows, cols, type, mem_tag::parameter);
  p.grad = be.alloc(rows, cols, type, mem_tag::gradient);
  return p;
}

// Frozen parameters get no gradient and are never touched by the optimizer.
inline void freeze(parameter& p) noexcept {
  p.trainable = false;
  p.grad_is_zero = false;
  p.grad.reset();
}

// Elements [first, first + count) of the N(0, stddev) fill of stream `stream` under `seed`, into
// out: Box-Muller on Philox bits, elements 2k and 2k + 1 from the one Philox block of counter k
// (random_bits indices 4k .. 4k + 3), so an element depends on (seed, stream, index) only.
inline void normal_values_into(double* out, std::uint64_t first, std::size_t count, std::uint64_t seed, std::uint32_t stream,
                               double stddev) {
  detail::require(stddev >= 0 && std::isfinite(stddev), "normal_values: stddev must be finite and >= 0, got ", stddev);
  constexpr double two_pi = 6.283185307179586476925;
  // 53-bit uniforms in (0, 1]: never log(0).
  const auto uniform = [](std::uint32_t hi, std::uint32_t lo) {
    const std::uint64_t bits = (std::uint64_t{hi} << 21) ^ lo;
    return (static_cast<double>(bits & ((std::uint64_t{1} << 53) - 1)) + 1.0) * 0x1p-53;
  };
  for (std::uint64_t i = first; i < first + count;) {
    const std::uint64_t pair = i / 2;
    const philox_block b = random_bits_x4(seed, stream, pair);
    const double r = std::sqrt(-2.0 * std::log(uniform(b.v[0], b.v[1]))), a = two_pi * uniform(b.v[2], b.v[3]);
    if (i % 2 == 0) {
      out[i - first] = stddev * r * std::cos(a);
      ++i;
    }
    if (i < first + count && i / 2 == pair) {
      out[i - first] = stddev * r * std::sin(a);
      ++i;
    }
  }
}

// n normal(0, stddev) values, deterministic in (seed, stream): elements 0 .. n - 1 above.
inline std::vector<double> normal_values(std::size_t n, std::uint64_t seed, std::uint32_t stream, double stddev) {
  std::vector<double> out(n);
  normal_values_into(out.data(), 0, n, seed, stream, stddev);
  return out;
}

inline std::vector<double> uniform_values(std::size_t n, std::uint64_t seed, std::uint32_t stream, double bound) {
  detail::require(bound >= 0 && std::isfinite(bound), "uniform_values: bound must be finite and >= 0, got ", bound);
  std::vector<double> out(n);
  for (std::size_t i = 0; i < n; ++i) out[i] = bound * (2.0 * (random_bits(seed, stream, i) * 0x1p-32) - 1.0);
  return out;
}

// Elements [first, first + dst.size()) of p's initial values (p.init) written into dst, a tensor
// of that many elements (a view of p's memory, or of a flat buffer of shards). Normal fills are
// made on the host by `threads` threads (0: every hardware thread) a chunk at a time, so host
// memory stays bounded; the values are the same bits for any threads and chunking.
inline void write_initial_values(backend& be, const parameter& p, tensor dst, std::size_t first, unsigned threads = 0) {
  const parameter_init& in = p.init;
  detail::require(in.how != parameter_init::kind::none, "write_initial_values: parameter '", p.name, "' records no initializer");
  if (dst.size() == 0) return;
  if (in.how == parameter_init::kind::constant) return be.fill(dst, in.value);
  if (threads == 0) threads = std::max(1u, std::thread::hardware_concurrency());
  constexpr std::size_t chunk = std::size_t{1} << 22;  // elements per write (32 MiB of doubles)
  std::vector<double> values;
  for (std::size_t done = 0; done < dst.size(); done += chunk) {
    const std::size_t n = std::min(chunk, dst.size() - done);
    values.resize(n);
    const std::size_t per = (n + threads - 1) / threads;
    std::vector<std::thread> pool;
    for (std::size_t lo = 0; lo < n; lo += per) {
      const std::size_t hi = std::min(n, lo + per);
      auto work = [&, lo, hi] { normal_values_into(values.data() + lo, first + done + lo, hi - lo, in.seed, in.stream, in.value); };
      if (hi == n) work();  // the last piece on this thread
      else pool.emplace_back(work);
    }
    for (std::thread& t : pool) t.join();
    tensor piece = view_of(dst, done, 1, n);
    be.write(piece, values);
  }
}

// Records p's initializer and, unless p's memory is deferred, writes the values (the caller bumps
// p.version where a cached copy may exist).
inline void initialize(backend& be, parameter& p, const parameter_init& in, unsigned threads = 0) {
  detail::require(in.how != parameter_init::kind::normal || (in.value >= 0 && std::isfinite(in.value)),
                  "normal_values: stddev must be finite and >= 0, got ", in.value);
  p.init = in;
  if (!p.value.defined()) return;
  write_initial_values(be, p, p.value, 0, threads);
}

// A deferred parameter given its own memory (value and, when trainable, gradient) and its
// initial values.
inline void allocate_deferred(backend& be, parameter& p, unsigned threads = 0) {
  if (!p.deferred()) return;
  const tensor shape = p.value;
  p.value = be.alloc(shape.rows(), shape.cols(), shape.type(), mem_tag::parameter);
  if (p.trainable) p.grad = be.alloc(shape.rows(), shape.cols(), shape.type(), mem_tag::gradient);
  write_initial_values(be, p, p.value, 0, threads);
}

// A 32-bit Philox stream from small integers (layer id, purpose, counter).
constexpr std::uint32_t mix_stream(std::uint64_t a, std::uint64_t b = 0, std::uint64_t c = 0) noexcept {
  std::uint64_t z = a * 0x9E3779B97F4A7C15ull ^ (b + 0x632BE59BD9B4E019ull) * 0xBF58476D1CE4E5B9ull ^ c * 0x94D049BB133111EBull;
  z ^= z >> 31;
  z *= 0xD6E8FEB86659FD93ull;
  z ^= z >> 32;
  return static_cast<std::uint32_t>(z);
}

}  // namespace nn
MXKIT_END_NAMESPACE
