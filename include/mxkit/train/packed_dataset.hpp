// SPDX-License-Identifier: Apache-2.0
#pragma once
// A packed fine-tuning dataset: N rows of T tokens, each row one training sample (several
// examples packed back to back, or one padded), as a plain .npy array [N, T], with an optional
// loss mask [N, T] beside it.
//   tokens     NAME.npy: int32 ('<i4'), or any integer dtype whose values fit int32 tokens
//              (int64, uint16, uint8, ...: every value is checked, >= 0 and < 2^31)
//   loss mask  NAME.loss_mask.npy (the default: the tokens' file name with ".npy" replaced by
//              ".loss_mask.npy"), or a path given: bool or integer, values 0 or 1, the same shape.
//              mask[n][t] = 1: token t of row n counts as a target, i.e. in the loss of
//              predicting it from tokens 0 .. t - 1 (mask[n][0] is never used: nothing predicts
//              the first token). This is NeMo's alignment: GPTSFTPackedDataset (nemo/collections/
//              nlp/data/language_modeling/megatron/gpt_sft_dataset.py) takes labels as
//              input_ids[1:] and the loss mask entries at the same positions.
// Why this format and not NeMo's own: NeMo's packed file (prepare_packed_ft_dataset.py, read by
// GPTSFTPackedDataset._load_dataset with numpy.load(allow_pickle=True)) is an object array of
// pickled Python dicts {input_ids, loss_mask, seq_start_id} of varying lengths: reading it means
// running Python's unpickler on the file, which a C++ reader should not do and cannot do safely.
// The MLPerf Llama 2 70B LoRA reference reads its packed GovReport rows from a Hugging Face dataset
// (input_ids, labels with -100 for prompt tokens: the same information as a mask). The format here
// keeps what both carry, fixed-shape tokens and a 0/1 mask per token, in the one array format
// NumPy, PyTorch and every language read without code (npy.hpp); tools/make_dataset.py writes it.
// A row of T tokens is a sample of seq + 1 = T: inputs tokens 0 .. T - 2, targets 1 .. T - 1.
//
// Sample order (packed_samples): NeMo's packed samples mapping (GPTSFTPackedDataset.
// _build_samples_mapping): epochs of the rows, each epoch a seeded permutation of them (one
// RandomState, epoch after epoch: seeded_shuffle.hpp), as many epochs as the samples the run reads
// need, read in order. Without shuffling (evaluation), the rows in file order.
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <limits>
#include <memory>
#include <numeric>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include <mxkit/error.hpp>
#include <mxkit/train/npy.hpp>
#include <mxkit/train/sample_batches.hpp>
#include <mxkit/train/seeded_shuffle.hpp>

MXKIT_BEGIN_NAMESPACE
namespace nn {

class packed_dataset {
 public:
  // The default loss mask beside a tokens file: "x.npy" -> "x.loss_mask.npy" ("x" -> "x.loss_mask.npy").
  static std::filesystem::path default_mask_path(const std::filesystem::path& tokens) {
    std::string s = tokens.string();
    if (s.size() >= 4 && s.compare(s.size() - 4, 4, ".npy") == 0) s.resize(s.size() - 4);
    return s + ".loss_mask.npy";
  }

  // The tokens, and the loss mask: `mask` when given (it must exist), else the default path if a
  // file is there, else none.
  explicit packed_dataset(const std::filesystem::path& tokens, std::optional<std::filesystem::path> mask = std::nullopt)
      : tokens_(tokens, "packed tokens") {
    check_shape(tokens_, "");
    rows_ = tokens_.shape()[0];
    row_ = tokens_.shape()[1];
    for (std::uint64_t i = 0; i < tokens_.elements(); ++i) {
      const std::int64_t v = tokens_.integer(i);
      if (v < 0 || v > std::numeric_limits<std::int32_t>::max())
        detail::fail(tokens_.name(), ": token ", v, " (row ", i / row_, ", position ", i % row_, ") is ", v < 0 ? "negative" : "past the int32 range",
                     tokens_.kind() == 'u' && tokens_.item_size() == 8 ? " (or a uint64 past 2^63)" : "", ": tokens must be in [0, 2^31)");
      if (v > max_token_) max_token_ = v;
    }
    std::error_code ec;
    if (!mask && std::filesystem::exists(default_mask_path(tokens), ec)) mask = default_mask_path(tokens);
    if (!mask) return;
    mask_.emplace(*mask, "packed loss mask");
    check_shape(*mask_, " (the loss mask of " + tokens_.name() + ")");
    detail::require(mask_->shape() == tokens_.shape(), mask_->name(), ": shape (", mask_->shape()[0], ", ", mask_->shape()[1],
                    ") differs from the tokens' (", rows_, ", ", row_, ") in ", tokens_.name());
    for (std::uint64_t i = 0; i < mask_->elements(); ++i) {
      const std::int64_t v = mask_->integer(i);
      detail::require(v == 0 || v == 1, mask_->name(), ": value ", v, " (row ", i / row_, ", position ", i % row_, ") is not 0 or 1");
    }
  }

  std::uint64_t rows() const noexcept { return rows_; }
  std::size_t row_length() const noexcept { return static_cast<std::size_t>(row_); }
  std::int64_t max_token() const noexcept { return max_token_; }
  bool has_mask() const noexcept { return mask_.has_value(); }
  const npy_array& tokens_file() const noexcept { return tokens_; }
  const npy_array* mask_file() const noexcept { return mask_ ? &*mask_ : nullptr; }

  void read_row(std::uint64_t r, std::int32_t* out) const {
    detail::require(r < rows_, tokens_.name(), ": row ", r, " of ", rows_);
    for (std::uint64_t t = 0; t < row_; ++t) out[t] = static_cast<std::int32_t>(tokens_.integer(r * row_ + t));
  }
  // The row's mask (all ones without a mask file).
  void read_mask(std::uint64_t r, std::uint8_t* out) const {
    detail::require(r < rows_, tokens_.name(), ": row ", r, " of ", rows_);
    for (std::uint64_t t = 0; t < row_; ++t) out[t] = mask_ ? static_cast<std::uint8_t>(mask_->integer(r * row_ + t)) : 1;
  }

 private:
  npy_array tokens_;
  std::optional<npy_array> mask_;
  std::uint64_t rows_ = 0, row_ = 0;
  std::int64_t max_token_ = -1;

  static void check_shape(const npy_array& a, const std::string& what) {
    detail::require(a.kind() != 'b' || what.size() > 0, a.name(), ": dtype '", a.descr(), "' is bool: tokens must be integers");
    detail::require(a.shape().size() == 2, a.name(), what, ": ", a.shape().size(), "-dimensional; a packed array is [rows, tokens per row]");
    detail::require(a.shape()[0] > 0 && a.shape()[1] >= 2, a.name(), what, ": shape (", a.shape()[0], ", ", a.shape()[1],
                    "): a packed array needs at least one row of at least 2 tokens");
  }
};

struct packed_sample_config {
  std::uint64_t samples = 0;  // samples the run reads; 0: one epoch
  std::uint64_t seed = 0;     // [0, 2^32)
  bool shuffle = true;        // false: rows in file order (evaluation)
};

class packed_samples : public token_samples {
 public:
  // Rows [first_row, last_row) of `data`.
  packed_samples(std::shared_ptr<const packed_dataset> data, std::uint64_t first_row, std::uint64_t last_row, const packed_sample_config& c)
      : data_(std::move(data)), first_(first_row) {
    detail::require(data_ != nullptr, "packed_samples: no dataset");
    detail::require(first_row < last_row && last_row <= data_->rows(), "packed_samples: rows [", first_row, ", ", last_row, ") of ", data_->rows());
    const std::uint64_t rows = last_row - first_row;
    const std::uint64_t epochs = c.samples == 0 ? 1 : c.samples / rows + (c.samples % rows != 0);  // numpy.ceil(samples / rows)
    detail::require(rows <= 0xFFFFFFFFull && epochs <= (SIZE_MAX / 4) / rows, "packed_samples: ", epochs, " epochs of ", rows, " rows do not fit in memory");
    order_.resize(static_cast<std::size_t>(epochs * rows));
    seeded_shuffle rng(c.shuffle ? c.seed : 0);
    for (std::uint64_t e = 0; e < epochs; ++e) {
      const std::span<std::uint32_t> epoch(order_.data() + e * rows, static_cast<std::size_t>(rows));
      std::iota(epoch.begin(), epoch.end(), std::uint32_t{0});
      if (c.shuffle) rng.shuffle(epoch);
    }
  }
  std::uint64_t size() const noexcept override { return order_.size(); }
  std::size_t window() const noexcept override { return data_->row_length(); }
  void fill(std::uint64_t i, std::int32_t* out) const override { data_->read_row(row(i), out); }
  // The row's loss mask (all ones without a mask file); a batch of these samples carries it only
  // where the file has one (has_loss_mask).
  bool has_loss_mask() const noexcept override { return data_->has_mask(); }
  void fill_mask(std::uint64_t i, std::uint8_t* out) const override { data_->read_mask(row(i), out); }
  // The row of `data` that sample i reads.
  std::uint64_t row(std::uint64_t i) const {
    detail::require(i < order_.size(), "packed_samples: sample ", i, " of ", order_.size());
    return first_ + order_[static_cast<std::size_t>(i)];
  }

 private:
  std::shared_ptr<const packed_dataset> data_;
  std::uint64_t first_ = 0;
  std::vector<std::uint32_t> order_;
};

}  // namespace nn
MXKIT_END_NAMESPACE
