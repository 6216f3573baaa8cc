// SPDX-License-Identifier: Apache-2.0
#pragma once
// Training samples of seq + 1 tokens from a Megatron indexed dataset, built as Megatron-LM's
// GPTDataset builds them (megatron/core/datasets/gpt_dataset.py,
// _build_document_sample_shuffle_indices, and helpers.cpp, build_sample_idx):
//   units            the dataset's sequences (what GPTDataset calls documents and shuffles; with
//                    preprocess_data.py's default, one sequence a document), of a contiguous range
//                    of documents: the split, as Megatron's splits are contiguous ranges.
//   epochs           tokens_per_epoch T = the range's tokens. A run that reads N samples needs
//                    N seq + 1 tokens (the +1: the last sample's extra token), so the epochs are
//                    the smallest E with E T >= N seq + 1 (_get_num_epochs).
//   document index   the units of every epoch in a seeded order, epoch after epoch.
//   sample index     the concatenation of the document index is one token stream S, documents
//                    back to back across their boundaries, each document's end-of-document token
//                    kept (the dataset holds it: tools/make_dataset.py appends one per document,
//                    as preprocess_data.py --append-eod does). Sample k is S[k seq, k seq + seq]:
//                    seq + 1 tokens, the last one the first of sample k + 1 (the +1 overlap). There
//                    are (E T - 1) / seq samples (drop_last_partial_sequence). Stored as
//                    build_sample_idx stores it, for each sample boundary the position in the
//                    document index and the offset in that unit of the sample's first token.
//   shuffle index    the order in which the samples are read, seeded.
// So within an epoch every token is in exactly one sample (a sample's first seq tokens; its extra
// token is the next sample's first), in the order the seed gives the documents.
//
// The seed drives one numpy RandomState-compatible generator (seeded_shuffle.hpp), used call after
// call as Megatron uses its numpy_random_state: the document index first, then the shuffle index.
// Where this departs from Megatron, and why:
//   - the document index is shuffled epoch by epoch (each epoch a permutation of the units), where
//     Megatron shuffles all E copies of the units as one array (or the first E - 1 together and the
//     last apart, separate_final_epoch). Per epoch, every epoch holds each token once, which is the
//     property above; Megatron's joint shuffle lets a document appear twice in one epoch's span.
//   - the shuffle index is shuffled epoch by epoch too: the samples that start in epoch e are
//     permuted among themselves and read after those of epoch e - 1 (a sample that straddles two
//     epochs belongs to the one it starts in). Megatron shuffles all samples together, and when
//     the final epoch is less than 80% used shuffles it apart (separate_final_epoch), so that the
//     samples read come from the whole epochs first; reading epoch by epoch gives that for every
//     epoch, with no threshold.
// With one epoch (a run shorter than the data) both are Megatron's own orders: the same document
// index, sample index and shuffle index from the same seed (the split's units, as Megatron's
// GPTDataset of that split would).
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <numeric>
#include <string>
#include <span>
#include <utility>
#include <vector>

#include <mxkit/error.hpp>
#include <mxkit/train/indexed_dataset.hpp>
#include <mxkit/train/sample_batches.hpp>
#include <mxkit/train/seeded_shuffle.hpp>

MXKIT_BEGIN_NAMESPACE
namespace nn {

struct gpt_sample_config {
  std::size_t seq = 0;         // a sample is seq + 1 tokens
  std::uint64_t samples = 0;   // samples the run reads (steps x global batch); 0: one epoch's
  std::uint64_t seed = 0;      // [0, 2^32), numpy.random.RandomState's seeds
  bool shuffle = true;         // false: units in file order, samples in order (evaluation)
};

class gpt_samples : public token_samples {
 public:
  // Documents [first_document, last_document) of `data`.
  gpt_samples(std::shared_ptr<const indexed_dataset> data, std::uint64_t first_document, std::uint64_t last_document, const gpt_sample_config& c)
      : data_(std::move(data)), c_(c) {
    detail::require(data_ != nullptr, "gpt_samples: no dataset");
    detail::require(c.seq > 0, "gpt_samples: seq must be positive");
    detail::require(first_document < last_document && last_document <= data_->documents(), "gpt_samples: documents [", first_document, ", ",
                    last_document, ") of ", data_->documents());
    first_unit_ = data_->first_sequence(first_document);
    const std::uint64_t units = data_->first_sequence(last_document) - first_unit_;
    detail::require(units <= 0xFFFFFFFFull, "gpt_samples: ", units, " sequences; the document index holds 32-bit sequence numbers (as Megatron's int32 one)");
    for (std::uint64_t u = 0; u < units; ++u) tokens_per_epoch_ += data_->length(first_unit_ + u);
    std::string what = "'";  // (appended, not "'" + string: GCC 12 warns falsely on that, -Wstringop-overflow)
    what.append(data_->prefix().string()).append("' documents [").append(std::to_string(first_document)).append(", ");
    what.append(std::to_string(last_document)).append(")");
    detail::require(tokens_per_epoch_ > 0, what, " hold no tokens");
    // Epochs: the smallest E with E T >= samples x seq + 1.
    epochs_ = 1;
    if (c.samples > 0) {
      const std::uint64_t T = tokens_per_epoch_;
      detail::require(c.samples <= (UINT64_MAX - 1) / c.seq, "gpt_samples: ", c.samples, " samples of ", c.seq, " tokens overflow a 64-bit count");
      const std::uint64_t need = c.samples * c.seq + 1;
      epochs_ = need / T + (need % T != 0);
    }
    detail::require(epochs_ <= UINT64_MAX / tokens_per_epoch_ && epochs_ * units <= SIZE_MAX / 4, "gpt_samples: ", epochs_, " epochs of ", what,
                    " do not fit in memory");
    const std::uint64_t stream = epochs_ * tokens_per_epoch_;
    samples_ = (stream - 1) / c.seq;
    detail::require(samples_ > 0, what, ": ", tokens_per_epoch_, " tokens cannot fill one sample of seq + 1 = ", c.seq + 1, " tokens");

    seeded_shuffle rng(c.shuffle ? c.seed : 0);
    // Document index: epoch after epoch, each a permutation of the units.
    documents_.resize(static_cast<std::size_t>(epochs_ * units));
    for (std::uint64_t e = 0; e < epochs_; ++e) {
      const std::span<std::uint32_t> epoch(documents_.data() + e * units, static_cast<std::size_t>(units));
      std::iota(epoch.begin(), epoch.end(), std::uint32_t{0});
      if (c.shuffle) rng.shuffle(epoch);
    }
    build_sample_index();
    // Shuffle index: the samples starting in epoch e, [ceil(e T / seq), ceil((e + 1) T / seq)), permuted.
    order_.resize(static_cast<std::size_t>(samples_));
    std::iota(order_.begin(), order_.end(), std::uint64_t{0});
    if (c.shuffle)
      for (std::uint64_t e = 0; e < epochs_; ++e) {
        const std::uint64_t lo = first_sample_at(e * tokens_per_epoch_), hi = std::min(first_sample_at((e + 1) * tokens_per_epoch_), samples_);
        if (lo < hi) rng.shuffle(std::span<std::uint64_t>(order_.data() + lo, static_cast<std::size_t>(hi - lo)));
      }
  }

  std::uint64_t size() const noexcept override { return samples_; }
  std::size_t window() const noexcept override { return c_.seq + 1; }
  // The i-th sample read: sample order(i) of the stream.
  void fill(std::uint64_t i, std::int32_t* out) const override {
    detail::require(i < samples_, "gpt_samples: sample ", i, " of ", samples_);
    fill_stream_sample(order_[static_cast<std::size_t>(i)], out);
  }
  // Sample k of the stream (before the shuffle index): S[k seq, k seq + seq].
  void fill_stream_sample(std::uint64_t k, std::int32_t* out) const {
    detail::require(k < samples_, "gpt_samples: sample ", k, " of ", samples_);
    std::uint64_t entry = boundaries_[static_cast<std::size_t>(k)].entry, offset = boundaries_[static_cast<std::size_t>(k)].offset;
    for (std::size_t left = c_.seq + 1; left > 0;) {
      const std::uint64_t unit = first_unit_ + documents_[static_cast<std::size_t>(entry)];
      const std::uint64_t len = data_->length(unit);
      const std::size_t n = static_cast<std::size_t>(std::min<std::uint64_t>(len - offset, left));
      data_->read(unit, offset, n, out);
      out += n;
      left -= n;
      ++entry;
      offset = 0;
    }
  }

  std::uint64_t epochs() const noexcept { return epochs_; }
  std::uint64_t tokens_per_epoch() const noexcept { return tokens_per_epoch_; }
  // The document index: sequence numbers relative to the range's first, epoch after epoch.
  std::span<const std::uint32_t> document_index() const noexcept { return documents_; }
  // The shuffle index: the stream sample read i-th.
  std::uint64_t order(std::uint64_t i) const {
    detail::require(i < samples_, "gpt_samples: sample ", i, " of ", samples_);
    return order_[static_cast<std::size_t>(i)];
  }
  // The first stream sample that starts at or after stream position p.
  std::uint64_t first_sample_at(std::uint64_t p) const noexcept { return p / c_.seq + (p % c_.seq != 0); }

 private:
  struct boundary {
    std::uint64_t entry = 0, offset = 0;  // position in the document index, token offset in that unit
  };
  std::shared_ptr<const indexed_dataset> data_;
  gpt_sample_config c_;
  std::uint64_t first_unit_ = 0, tokens_per_epoch_ = 0, epochs_ = 1, samples_ = 0;
  std::vector<std::uint32_t> documents_;
  std::vector<boundary> boundaries_;  // samples_ + 1, as build_sample_idx's [num_samples + 1, 2]
  std::vector<std::uint64_t> order_;

  // Where each sample starts: boundary k is stream position k seq, in the unit that holds it
  // (empty units are passed over: no sample starts in one).
  void build_sample_index() {
    boundaries_.resize(static_cast<std::size_t>(samples_ + 1));
    std::uint64_t entry = 0, unit_start = 0;  // stream position of the entry's first token
    for (std::uint64_t k = 0; k <= samples_; ++k) {
      const std::uint64_t p = k * c_.seq;  // < E T: (samples_ seq) <= E T - 1
      for (;;) {
        const std::uint64_t len = data_->length(first_unit_ + documents_[static_cast<std::size_t>(entry)]);
        if (p < unit_start + len) break;
        unit_start += len;
        ++entry;
      }
      boundaries_[static_cast<std::size_t>(k)] = {entry, p - unit_start};
    }
  }
};

}  // namespace nn
MXKIT_END_NAMESPACE
