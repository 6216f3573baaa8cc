// SPDX-License-Identifier: Apache-2.0
#pragma once
// The seeded shuffle of the token datasets' document and sample orders: the permutation that
// numpy's legacy numpy.random.RandomState(seed).shuffle(x) makes of a 1-D array, so that an order
// built here is the order Megatron-LM and NeMo build from the same seed, and a plain NumPy
// script can check it (tests/train/check_token_data.py does).
//   generator  MT19937 seeded with a 32-bit integer (numpy's legacy seeding, mt19937_seed, is
//              the reference init_genrand, which std::mt19937's constructor is by the standard:
//              [rand.eng.mers]); numpy refuses seeds outside [0, 2^32), and so does this header.
//   shuffle    Fisher-Yates from the end: for i = n-1 down to 1, swap x[i] with x[j], j drawn
//              uniformly from [0, i] (numpy/random/mtrand.pyx, RandomState.shuffle -> _shuffle_raw).
//   draw j     numpy's legacy random_interval(max = i) (numpy/random/src/distributions/
//              distributions.c): the smallest all-ones mask >= max, then 32-bit outputs masked
//              until one is <= max (rejection, no modulo bias); past 2^32 - 1, 64-bit outputs
//              made of two 32-bit ones, the first the high word (numpy's mt19937_next64 writes
//              both calls in one expression, whose order C leaves open: arrays of 2^32 and
//              more elements may not match numpy's order, and nothing here relies on it).
// Users: Megatron's _build_document_index and _build_shuffle_index (megatron/core/datasets/
// gpt_dataset.py) and NeMo's packed samples mapping (GPTSFTPackedDataset._build_samples_mapping)
// all shuffle with one RandomState, call after call; gpt_samples.hpp and packed_dataset.hpp do too.
#include <cstddef>
#include <cstdint>
#include <random>
#include <span>
#include <utility>

#include <mxkit/error.hpp>

MXKIT_BEGIN_NAMESPACE
namespace nn {

class seeded_shuffle {
 public:
  // seed: what numpy.random.RandomState accepts, [0, 2^32).
  explicit seeded_shuffle(std::uint64_t seed) : gen_(static_cast<std::mt19937::result_type>(checked(seed))) {}

  // A uniform integer in [0, max], numpy's legacy random_interval.
  std::uint64_t interval(std::uint64_t max) {
    if (max == 0) return 0;
    std::uint64_t mask = max;
    for (int s = 1; s < 64; s *= 2) mask |= mask >> s;
    if (max <= 0xFFFFFFFFull) {
      for (;;)
        if (const std::uint64_t v = gen_() & mask; v <= max) return v;
    }
    // numpy's mt19937 next_uint64: the first 32-bit output is the high word.
    for (;;) {
      const std::uint64_t hi = gen_(), lo = gen_();
      if (const std::uint64_t v = ((hi << 32) | lo) & mask; v <= max) return v;
    }
  }

  // x shuffled in place as RandomState.shuffle(x) does.
  template <class T>
  void shuffle(std::span<T> x) {
    for (std::size_t i = x.size(); i-- > 1;) {
      const std::size_t j = static_cast<std::size_t>(interval(i));
      std::swap(x[i], x[j]);
    }
  }

 private:
  std::mt19937 gen_;
  static std::uint64_t checked(std::uint64_t seed) {
    detail::require(seed <= 0xFFFFFFFFull, "shuffle seed ", seed, " is outside [0, 2^32) (numpy.random.RandomState's seeds, whose orders this follows)");
    return seed;
  }
};

}  // namespace nn
MXKIT_END_NAMESPACE
