// SPDX-License-Identifier: Apache-2.0
#pragma once
// Batches made of a token dataset's samples. A sample is one training row of seq + 1 tokens
// (inputs are its first seq tokens, targets its last seq: the next token at every position), as
// Megatron's GPTDataset hands out sequence_length + 1 tokens (add_extra_token_to_sequence) and a
// packed fine-tuning row holds its labels shifted by one.
//   token_samples    the interface: how many samples, their length, sample i's tokens (and its
//                    loss mask, where the samples have one: packed_dataset.hpp). Its
//                    implementations put the samples in the order they are read: gpt_samples.hpp
//                    (Megatron's sample rule) and packed_dataset.hpp (rows of an .npy array).
//   sample_batches   nn::batch_source over them: batch n is samples n B .. n B + B - 1, so the
//                    trainer's batch numbering (step x global micro-batches + micro-batch,
//                    train/training.hpp) reads the samples in order, each once, on any number of ranks.
//   sequential_sample_batches   up to k batches of the first samples, for evaluation.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include <mxkit/error.hpp>
#include <mxkit/train/data.hpp>

MXKIT_BEGIN_NAMESPACE
namespace nn {

class token_samples {
 public:
  virtual ~token_samples() = default;
  virtual std::uint64_t size() const noexcept = 0;  // samples
  virtual std::size_t window() const noexcept = 0;  // tokens a sample: seq + 1
  // Sample i's window() tokens into out.
  virtual void fill(std::uint64_t i, std::int32_t* out) const = 0;
  // Whether the samples carry a loss mask, and sample i's: window() entries, 0 or 1, entry t for
  // token t (whether it counts as a target; entry 0 is never one). Without one, every target counts.
  virtual bool has_loss_mask() const noexcept { return false; }
  virtual void fill_mask(std::uint64_t i, std::uint8_t* out) const {
    (void)i;
    (void)out;
    detail::fail("token_samples: these samples have no loss mask");
  }
};

namespace samples_detail {
// Samples first .. first + B - 1 as one batch: row b's inputs are sample first + b's first seq
// tokens, its targets the last seq, and the loss mask of a target its token's mask entry.
inline batch batch_of_samples(const token_samples& s, const batch_shape& shape, std::uint64_t first) {
  const std::size_t T = shape.seq;
  batch out{shape, std::vector<std::int32_t>(shape.tokens()), std::vector<std::int32_t>(shape.tokens())};
  std::vector<std::int32_t> row(T + 1);
  std::vector<std::uint8_t> mask;
  if (s.has_loss_mask()) {
    out.loss_mask.resize(shape.tokens());
    mask.resize(T + 1);
  }
  for (std::size_t b = 0; b < shape.batch; ++b) {
    s.fill(first + b, row.data());
    for (std::size_t t = 0; t < T; ++t) {
      out.inputs[b * T + t] = row[t];
      out.targets[b * T + t] = row[t + 1];
    }
    if (mask.empty()) continue;
    s.fill_mask(first + b, mask.data());
    for (std::size_t t = 0; t < T; ++t) out.loss_mask[b * T + t] = mask[t + 1];
  }
  return out;
}
}  // namespace samples_detail

class sample_batches : public batch_source {
 public:
  sample_batches(std::shared_ptr<const token_samples> samples, const batch_shape& shape) : samples_(std::move(samples)), shape_(shape) {
    const std::size_t window = detail::checked_batch_window("sample_batches", shape);
    detail::require(samples_ != nullptr, "sample_batches: no samples");
    detail::require(samples_->window() == window, "sample_batches: samples of ", samples_->window(), " tokens, but batches of --seq ",
                           shape.seq, " need ", window);
  }
  // Batch n: samples n B .. n B + B - 1; a batch past the last sample is refused (the samples were
  // built for a number of steps: gpt_sample_config::samples, packed epochs).
  batch at(std::uint64_t n) const override {
    const std::uint64_t B = shape_.batch;
    detail::require(n < samples_->size() / B, "sample_batches: batch ", n, " needs samples ", n * B, " to ", n * B + B - 1, ", but only ",
                           samples_->size(), " were built");
    return samples_detail::batch_of_samples(*samples_, shape_, n * B);
  }
  const batch_shape& shape() const noexcept override { return shape_; }
  std::uint64_t batches() const noexcept { return samples_->size() / shape_.batch; }

 private:
  std::shared_ptr<const token_samples> samples_;
  batch_shape shape_;
};

// Up to max_batches batches of samples 0, 1, 2, ... (fewer if the samples end; the last partial
// batch is dropped). Refuses samples that cannot fill one batch.
inline std::vector<batch> sequential_sample_batches(const token_samples& s, const batch_shape& shape, std::size_t max_batches) {
  const std::size_t window = detail::checked_batch_window("sequential_sample_batches", shape);
  detail::require(s.window() == window, "sequential_sample_batches: samples of ", s.window(), " tokens, batches need ", window);
  detail::require(s.size() >= shape.batch, "sequential_sample_batches: ", s.size(), " samples cannot fill one batch of ", shape.batch);
  std::vector<batch> out;
  for (std::uint64_t first = 0; out.size() < max_batches && s.size() - first >= shape.batch; first += shape.batch)
    out.push_back(samples_detail::batch_of_samples(s, shape, first));
  return out;
}

}  // namespace nn
MXKIT_END_NAMESPACE
