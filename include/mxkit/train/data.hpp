// SPDX-License-Identifier: Apache-2.0
#pragma once
// Training data: byte-level tokens (vocabulary 256, no merges: any file is a token stream), a
// corpus file split into a training part and a held-out validation tail, and a deterministic
// loader. The file is read in chunks, so any size that fits in memory at one byte per token
// works; every read is checked (file_io.hpp). The repository ships a small generated corpus
// in data/ (data/README.md).
//   train batches       random windows of seq + 1 tokens, offset b of batch n drawn from
//                       Philox(seed, n, b): reproducible and resumable (seek(n))
//   validation batches  consecutive non-overlapping windows from the start of the tail
// targets are the inputs shifted by one token.
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <new>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

#include <mxkit/checked_arithmetic.hpp>
#include <mxkit/error.hpp>
#include <mxkit/file_io.hpp>
#include <mxkit/nn/transformer_layer.hpp>
#include <mxkit/random/philox.hpp>

MXKIT_BEGIN_NAMESPACE
namespace detail {
// A batch of B windows of T + 1 tokens: B and T positive (a mean loss over no tokens is NaN), and
// neither T + 1 nor B * T may wrap (a wrapped size allocates a small batch that fill_window then
// writes past). Returns T + 1, the window length.
inline std::size_t checked_batch_window(const char* who, const nn::batch_shape& shape) {
  require(shape.batch > 0, who, ": batch must be positive, got ", shape.batch);
  require(shape.seq > 0, who, ": seq must be positive, got ", shape.seq);
  (void)checked_mul({"batch", shape.batch}, {"seq", shape.seq}, who, ": batch x seq");
  return checked_add({"seq", shape.seq}, {"one", 1}, who, ": seq + 1");
}
}  // namespace detail

namespace nn {

struct byte_tokenizer {
  static constexpr std::size_t vocab = 256;
  static std::vector<std::int32_t> encode(std::string_view text) {
    std::vector<std::int32_t> out(text.size());
    for (std::size_t i = 0; i < text.size(); ++i) out[i] = static_cast<unsigned char>(text[i]);
    return out;
  }
  static std::string decode(const std::vector<std::int32_t>& tokens) {
    std::string out(tokens.size(), '\0');
    for (std::size_t i = 0; i < tokens.size(); ++i) out[i] = static_cast<char>(tokens[i] & 0xFF);
    return out;
  }
};

using token_buffer = std::shared_ptr<const std::vector<std::uint8_t>>;

struct corpus_split {
  token_buffer train, validation;
};

// The last `validation_fraction` of the bytes is held out (a contiguous tail: no window of the
// training part overlaps it).
inline corpus_split split_corpus(std::vector<std::uint8_t> bytes, double validation_fraction) {
  detail::require(validation_fraction > 0.0 && validation_fraction < 1.0, "corpus: validation fraction must be in (0, 1), got ",
                  validation_fraction);
  const auto n_val = static_cast<std::size_t>(static_cast<double>(bytes.size()) * validation_fraction);
  const auto cut = bytes.end() - static_cast<std::ptrdiff_t>(n_val);
  auto val = std::make_shared<std::vector<std::uint8_t>>(cut, bytes.end());
  bytes.erase(cut, bytes.end());
  return {std::make_shared<const std::vector<std::uint8_t>>(std::move(bytes)), std::move(val)};
}

// Throws std::invalid_argument when the file cannot be opened, is empty or does not fit in
// memory (saying so: an endless device such as /dev/zero ends there, once the memory is spent),
// and std::system_error (with the OS reason, once) when a read fails: a read error never passes
// for a shorter corpus.
inline corpus_split load_corpus(const std::filesystem::path& path, double validation_fraction = 0.1) {
  const std::string name = "corpus: '" + path.string() + "'";
  std::optional<detail::input_file> in;
  try {
    in.emplace(path);
  } catch (const std::system_error& e) {
    detail::fail(name, ": ", e.what());  // "cannot open the file: <reason>"
  }
  std::vector<std::uint8_t> bytes;
  try {
    if (in->regular_size()) bytes.reserve(static_cast<std::size_t>(*in->regular_size()));
    constexpr std::size_t chunk = std::size_t{1} << 20;
    std::vector<std::uint8_t> buffer(chunk);
    for (std::size_t got = chunk; got == chunk;) {  // a short read is the end of the file
      got = in->read(buffer.data(), chunk);
      bytes.insert(bytes.end(), buffer.begin(), buffer.begin() + static_cast<std::ptrdiff_t>(got));
    }
    detail::require(!bytes.empty(), name, " is empty");
    return split_corpus(std::move(bytes), validation_fraction);
  } catch (const std::system_error& e) {
    // e.what() already ends with the OS reason, which the new error appends again: drop it once.
    std::string what = e.what();
    const std::string reason = ": " + e.code().message();
    if (what.size() >= reason.size() && what.compare(what.size() - reason.size(), reason.size(), reason) == 0)
      what.resize(what.size() - reason.size());
    throw std::system_error(e.code(), name + ": " + what);
  } catch (const std::bad_alloc&) {
    if (in->regular_size()) detail::fail(name, ": its ", *in->regular_size(), " bytes do not fit in memory");
    detail::fail(name, ": too large to hold in memory: an allocation failed after ", bytes.size(),
                 " bytes were read (an endless device or pipe?)");
  } catch (const std::length_error&) {
    detail::fail(name, ": too large to hold in memory (", in->regular_size() ? *in->regular_size() : bytes.size(), " bytes)");
  }
}

struct batch {
  batch_shape shape;
  std::vector<std::int32_t> inputs, targets;  // (B*T) each
  // (B*T) 0 or 1: whether each target counts in the loss (a packed dataset's loss mask: the loss is
  // the mean over the counted targets, nn/model.hpp); empty: every target counts.
  std::vector<std::int32_t> loss_mask = {};
};

// Window [offset, offset + seq] of `tokens` as row b of `out`.
inline void fill_window(const std::vector<std::uint8_t>& tokens, std::size_t offset, std::size_t b, batch& out) {
  const std::size_t T = out.shape.seq;
  for (std::size_t t = 0; t < T; ++t) {
    out.inputs[b * T + t] = tokens[offset + t];
    out.targets[b * T + t] = tokens[offset + t + 1];
  }
}

// Where a trainer's batches come from: batch n (0-based) of the run, a function of n alone, so
// that a resumed run and every rank (train_config::parallel) see the same batches. batch_loader
// below draws windows of a byte corpus; train/sample_batches.hpp serves token datasets' samples.
class batch_source {
 public:
  virtual ~batch_source() = default;
  virtual batch at(std::uint64_t n) const = 0;
  virtual const batch_shape& shape() const noexcept = 0;
};

class batch_loader : public batch_source {
 public:
  batch_loader(token_buffer tokens, const batch_shape& shape, std::uint64_t seed) : tokens_(std::move(tokens)), shape_(shape), seed_(seed) {
    const std::size_t window = detail::checked_batch_window("batch_loader", shape);
    detail::require(tokens_ && tokens_->size() > window, "batch_loader: ", tokens_ ? tokens_->size() : 0,
                           " tokens cannot fill a window of ", window);
  }
  // Batch number n (0-based).
  batch at(std::uint64_t n) const override {
    batch out{shape_, std::vector<std::int32_t>(shape_.tokens()), std::vector<std::int32_t>(shape_.tokens())};
    const std::uint64_t range = tokens_->size() - shape_.seq;  // offsets 0 .. size - seq - 1
    for (std::size_t b = 0; b < shape_.batch; ++b) {
      const std::uint64_t r = (std::uint64_t{random_bits(seed_, static_cast<std::uint32_t>(b), 2 * n)} << 32) |
                              random_bits(seed_, static_cast<std::uint32_t>(b), 2 * n + 1);
      fill_window(*tokens_, static_cast<std::size_t>(r % range), b, out);
    }
    return out;
  }
  batch next() { return at(position_++); }
  std::uint64_t position() const noexcept { return position_; }
  void seek(std::uint64_t n) noexcept { position_ = n; }
  const batch_shape& shape() const noexcept override { return shape_; }

 private:
  token_buffer tokens_;
  batch_shape shape_;
  std::uint64_t seed_;
  std::uint64_t position_ = 0;
};

// Up to max_batches batches of consecutive non-overlapping windows (fewer if the data ends).
inline std::vector<batch> sequential_batches(const token_buffer& tokens, const batch_shape& shape, std::size_t max_batches) {
  const std::size_t window = detail::checked_batch_window("sequential_batches", shape);
  detail::require(tokens && tokens->size() > window, "sequential_batches: too few tokens for one window");
  std::vector<batch> out;
  std::size_t offset = 0;
  // offset <= size - tokens() - 1 keeps the last window's extra token inside (no sum can wrap).
  while (out.size() < max_batches && tokens->size() > shape.tokens() && offset < tokens->size() - shape.tokens()) {
    batch b{shape, std::vector<std::int32_t>(shape.tokens()), std::vector<std::int32_t>(shape.tokens())};
    for (std::size_t r = 0; r < shape.batch; ++r, offset += shape.seq) fill_window(*tokens, offset, r, b);
    out.push_back(std::move(b));
  }
  detail::require(!out.empty(), "sequential_batches: ", tokens->size(), " tokens cannot fill one ", shape.batch, "x", shape.seq,
                  " batch");
  return out;
}

}  // namespace nn
MXKIT_END_NAMESPACE
