// SPDX-License-Identifier: Apache-2.0
#pragma once
// Megatron-LM's indexed dataset (also NeMo's): token sequences in a data file PREFIX.bin, described
// by an index file PREFIX.idx. Layout as megatron/core/datasets/indexed_dataset.py writes and reads
// it (_IndexWriter, _IndexReader, IndexedDatasetBuilder), every integer little-endian:
//   .idx  offset  size
//         0       9      magic "MMIDIDX\0\0" (_INDEX_HEADER)
//         9       8      u64 version, 1
//         17      1      u8 dtype code of the tokens (DType below)
//         18      8      u64 S, the number of sequences
//         26      8      u64 D, the number of document indices (documents + 1)
//         34      4 S    i32 sequence lengths, in tokens
//         34+4S   8 S    i64 sequence pointers, byte offsets into .bin (the running sum of
//                        length x token size, from 0)
//         34+12S  8 D    i64 document indices: sequence numbers where documents start, from 0,
//                        ending at S (IndexedDatasetBuilder starts the list at [0] and appends
//                        len(sequence_lengths) at each end_document)
//         34+12S+8D S    i8 sequence modes, multimodal datasets only (read past; unused here)
//   .bin  the tokens of every sequence, back to back, each of the dtype's size.
// DType codes (indexed_dataset.py, class DType): 1 uint8, 2 int8, 3 int16, 4 int32, 5 int64,
// 6 float64, 7 float32, 8 uint16. Tokens are int32 here: codes 1, 2, 3, 4 and 8 always fit, 5
// (int64) fits when every value does (checked), and the floating-point codes are refused by name.
// preprocess_data.py writes uint16 for vocabularies under 65500 and int32 above (DType.optimal_dtype).
//
// Everything is validated when the dataset is opened, before any token is handed out, and each
// failure is a std::invalid_argument naming the file and the field: the magic, the version, the
// dtype code, the counts against the .idx size, every length (>= 0), every pointer (the first 0,
// none below its predecessor, each sequence inside the .bin, each one's start equal to the previous
// start plus its length: lengths and pointers agree), the .bin size against the index (exactly the
// tokens it describes), the document indices (0 first, none below its predecessor, none past S, S
// last), and every token (>= 0 and, for int64, below 2^31). Megatron asserts only a few of these
// (the magic, the version, S == document_indices[-1]); a wrong index there fails later, or reads
// the wrong tokens. Opening therefore reads the whole .bin once (max_token() comes from that pass:
// the training program's default vocabulary), at disk speed.
//
// Both files are memory-mapped (mapped_file.hpp), as Megatron maps them; tokens are converted to
// int32 as they are copied out (read()).
#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <limits>
#include <string>
#include <string_view>
#include <utility>

#include <mxkit/error.hpp>
#include <mxkit/train/mapped_file.hpp>

MXKIT_BEGIN_NAMESPACE
namespace nn {

// Megatron's DType codes (indexed_dataset.py).
enum class megatron_dtype : std::uint8_t { uint8 = 1, int8 = 2, int16 = 3, int32 = 4, int64 = 5, float64 = 6, float32 = 7, uint16 = 8 };

inline constexpr std::string_view megatron_index_magic{"MMIDIDX\0\0", 9};

namespace megatron_detail {
// The dtype's name and size, or nullptr for an unknown code.
inline const char* megatron_dtype_name(std::uint8_t code) noexcept {
  constexpr const char* names[] = {nullptr, "uint8", "int8", "int16", "int32", "int64", "float64", "float32", "uint16"};
  return code < 9 ? names[code] : nullptr;
}
inline std::size_t megatron_dtype_size(megatron_dtype t) noexcept {
  switch (t) {
    case megatron_dtype::uint8:
    case megatron_dtype::int8: return 1;
    case megatron_dtype::int16:
    case megatron_dtype::uint16: return 2;
    case megatron_dtype::int32:
    case megatron_dtype::float32: return 4;
    case megatron_dtype::int64:
    case megatron_dtype::float64: return 8;
  }
  return 0;
}
// A little-endian integer at any byte offset (the .idx arrays start at offset 34, which is not
// aligned for them).
template <class T>
T load_le(const std::byte* p) noexcept {
  T v;
  std::memcpy(&v, p, sizeof v);
  if constexpr (std::endian::native == std::endian::big) {
    auto* b = reinterpret_cast<unsigned char*>(&v);
    for (std::size_t i = 0; i < sizeof v / 2; ++i) std::swap(b[i], b[sizeof v - 1 - i]);
  }
  return v;
}
}  // namespace megatron_detail

class indexed_dataset {
 public:
  // The two files of a prefix: PREFIX.idx and PREFIX.bin (Megatron's get_idx_path / get_bin_path:
  // the suffix is appended to the prefix as written).
  static std::filesystem::path index_path(const std::filesystem::path& prefix) { return prefix.string() + ".idx"; }
  static std::filesystem::path data_path(const std::filesystem::path& prefix) { return prefix.string() + ".bin"; }

  explicit indexed_dataset(const std::filesystem::path& prefix) : prefix_(prefix) {
    idx_ = mapped_file(index_path(prefix), "Megatron index");
    bin_ = mapped_file(data_path(prefix), "Megatron data file");
    read_index();
    check_tokens();
  }

  const std::filesystem::path& prefix() const noexcept { return prefix_; }
  megatron_dtype dtype() const noexcept { return dtype_; }
  const char* dtype_name() const noexcept { return megatron_detail::megatron_dtype_name(static_cast<std::uint8_t>(dtype_)); }
  std::uint64_t sequences() const noexcept { return sequences_; }
  std::uint64_t documents() const noexcept { return doc_entries_ - 1; }
  std::uint64_t tokens() const noexcept { return tokens_; }
  // The largest token, -1 when there is none.
  std::int64_t max_token() const noexcept { return max_token_; }

  std::uint64_t length(std::uint64_t sequence) const {
    detail::require(sequence < sequences_, "indexed dataset: sequence ", sequence, " of ", sequences_);
    return static_cast<std::uint64_t>(megatron_detail::load_le<std::int32_t>(lengths_ + 4 * sequence));
  }
  // Document d is sequences [first_sequence(d), first_sequence(d + 1)); d in [0, documents()].
  std::uint64_t first_sequence(std::uint64_t document) const {
    detail::require(document <= documents(), "indexed dataset: document index ", document, " of ", documents());
    return static_cast<std::uint64_t>(megatron_detail::load_le<std::int64_t>(doc_index_ + 8 * document));
  }
  // Tokens [offset, offset + count) of a sequence, as int32.
  void read(std::uint64_t sequence, std::uint64_t offset, std::size_t count, std::int32_t* out) const {
    const std::uint64_t n = length(sequence);
    detail::require(offset <= n && count <= n - offset, "indexed dataset: tokens [", offset, ", ", offset + count, ") of a sequence of ", n);
    const std::byte* p = bin_.bytes().data() + pointer(sequence) + offset * item_;
    switch (dtype_) {
      case megatron_dtype::uint8: convert<std::uint8_t>(p, count, out); break;
      case megatron_dtype::int8: convert<std::int8_t>(p, count, out); break;
      case megatron_dtype::int16: convert<std::int16_t>(p, count, out); break;
      case megatron_dtype::uint16: convert<std::uint16_t>(p, count, out); break;
      case megatron_dtype::int32: convert<std::int32_t>(p, count, out); break;
      case megatron_dtype::int64: convert<std::int64_t>(p, count, out); break;  // (values checked at open)
      default: break;  // (refused at open)
    }
  }

 private:
  std::filesystem::path prefix_;
  mapped_file idx_, bin_;
  megatron_dtype dtype_ = megatron_dtype::int32;
  std::size_t item_ = 4;
  std::uint64_t sequences_ = 0, doc_entries_ = 0, tokens_ = 0;
  std::int64_t max_token_ = -1;
  const std::byte *lengths_ = nullptr, *pointers_ = nullptr, *doc_index_ = nullptr;

  std::uint64_t pointer(std::uint64_t sequence) const { return static_cast<std::uint64_t>(megatron_detail::load_le<std::int64_t>(pointers_ + 8 * sequence)); }

  template <class T>
  static void convert(const std::byte* p, std::size_t count, std::int32_t* out) noexcept {
    for (std::size_t i = 0; i < count; ++i) out[i] = static_cast<std::int32_t>(megatron_detail::load_le<T>(p + i * sizeof(T)));
  }

  std::string where() const { return "Megatron index '" + index_path(prefix_).string() + "'"; }

  void read_index() {
    const std::string idx = where();
    const std::byte* b = idx_.bytes().data();
    const std::size_t size = idx_.size();
    constexpr std::size_t header = 34;
    detail::require(size >= megatron_index_magic.size() && std::memcmp(b, megatron_index_magic.data(), megatron_index_magic.size()) == 0,
                    idx, ": bad magic: not a Megatron indexed dataset index (it must start with \"MMIDIDX\\0\\0\")");
    detail::require(size >= header, idx, ": truncated: ", size, " bytes, shorter than the ", header, "-byte header");
    const auto version = megatron_detail::load_le<std::uint64_t>(b + 9);
    detail::require(version == 1, idx, ": bad version ", version, " (Megatron writes version 1, the only one defined)");
    const auto code = static_cast<std::uint8_t>(b[17]);
    const char* name = megatron_detail::megatron_dtype_name(code);
    detail::require(name != nullptr, idx, ": bad dtype code ", static_cast<unsigned>(code), " (Megatron's codes are 1 to 8)");
    dtype_ = static_cast<megatron_dtype>(code);
    detail::require(dtype_ != megatron_dtype::float32 && dtype_ != megatron_dtype::float64, idx, ": dtype code ", static_cast<unsigned>(code),
                    " is ", name, ": tokens must be integers (supported: uint8, int8, int16, uint16, int32, int64)");
    item_ = megatron_detail::megatron_dtype_size(dtype_);
    sequences_ = megatron_detail::load_le<std::uint64_t>(b + 18);
    doc_entries_ = megatron_detail::load_le<std::uint64_t>(b + 26);
    // The arrays' size, refusing counts whose byte sizes wrap.
    const auto s = static_cast<std::size_t>(sequences_), d = static_cast<std::size_t>(doc_entries_);
    detail::require(sequences_ <= SIZE_MAX / 16 && doc_entries_ <= SIZE_MAX / 16, idx, ": sequence count ", sequences_, " or document count ",
                    doc_entries_, " is larger than any file");
    const std::size_t need = header + 12 * s + 8 * d;
    detail::require(size == need || size == need + s, idx, ": ", size < need ? "truncated" : "trailing bytes", ": ", size, " bytes, but ",
                    sequences_, " sequences and ", doc_entries_, " document indices take ", need, " (", need + s, " with sequence modes)");
    lengths_ = b + header;
    pointers_ = lengths_ + 4 * s;
    doc_index_ = pointers_ + 8 * s;

    // Lengths and pointers: contiguous from 0, inside the .bin, agreeing with each other.
    const std::string bin = "Megatron data file '" + data_path(prefix_).string() + "'";
    const std::uint64_t bin_size = bin_.size();
    std::uint64_t expect = 0;
    for (std::uint64_t i = 0; i < sequences_; ++i) {
      const auto len = megatron_detail::load_le<std::int32_t>(lengths_ + 4 * i);
      const auto ptr = megatron_detail::load_le<std::int64_t>(pointers_ + 8 * i);
      detail::require(len >= 0, idx, ": sequence length ", i, " is ", len, " (negative)");
      detail::require(ptr >= 0 && (i == 0 || static_cast<std::uint64_t>(ptr) >= pointer(i - 1)), idx, ": sequence pointer ", i, " is ", ptr,
                      i == 0 ? " (negative)" : ", below the previous one " + std::to_string(pointer(i - 1)) + " (pointers must not decrease)");
      const std::uint64_t bytes = static_cast<std::uint64_t>(len) * item_;
      detail::require(static_cast<std::uint64_t>(ptr) <= bin_size && bytes <= bin_size - static_cast<std::uint64_t>(ptr), idx,
                      ": sequence pointer ", i, " is ", ptr, " with length ", len, " (", bytes, " bytes): out of range of the ", bin_size,
                      "-byte ", bin);
      detail::require(static_cast<std::uint64_t>(ptr) == expect, idx, ": sequence pointer ", i, " is ", ptr, " but the lengths before it (",
                      dtype_name(), ", ", item_, " bytes a token) put it at ", expect, ": lengths and pointers disagree");
      expect += bytes;
      tokens_ += static_cast<std::uint64_t>(len);
    }
    detail::require(expect == bin_size, bin, " has ", bin_size, " bytes, but its index describes ", expect, " (", tokens_, " ", dtype_name(),
                    " tokens): the two files do not belong together, or one is truncated");

    // Document indices: 0, never decreasing, S last.
    detail::require(doc_entries_ >= 1, idx, ": document count is 0 (the document indices start with 0 and end with the sequence count)");
    for (std::uint64_t i = 0; i < doc_entries_; ++i) {
      const auto v = megatron_detail::load_le<std::int64_t>(doc_index_ + 8 * i);
      const std::int64_t prev = i == 0 ? 0 : megatron_detail::load_le<std::int64_t>(doc_index_ + 8 * (i - 1));
      detail::require(i > 0 || v == 0, idx, ": document index 0 is ", v, " (the first document starts at sequence 0)");
      detail::require(v >= prev, idx, ": document index ", i, " is ", v, ", below the previous one ", prev, " (not monotone)");
      detail::require(static_cast<std::uint64_t>(v) <= sequences_, idx, ": document index ", i, " is ", v, ", past the sequence count ", sequences_);
    }
    const auto last = megatron_detail::load_le<std::int64_t>(doc_index_ + 8 * (doc_entries_ - 1));
    detail::require(static_cast<std::uint64_t>(last) == sequences_, idx, ": the last document index is ", last, ", not the sequence count ",
                    sequences_, " (sequences after it belong to no document)");
  }

  // Every token >= 0 and within int32, and the largest one.
  void check_tokens() {
    const std::byte* p = bin_.bytes().data();
    const std::uint64_t n = tokens_;
    auto scan = [&](auto zero) {
      using T = decltype(zero);
      for (std::uint64_t i = 0; i < n; ++i) {
        const auto v = static_cast<std::int64_t>(megatron_detail::load_le<T>(p + i * sizeof(T)));
        if (v < 0 || v > std::numeric_limits<std::int32_t>::max()) bad_token(i, v);
        if (v > max_token_) max_token_ = v;
      }
    };
    switch (dtype_) {
      case megatron_dtype::uint8: scan(std::uint8_t{}); break;
      case megatron_dtype::int8: scan(std::int8_t{}); break;
      case megatron_dtype::int16: scan(std::int16_t{}); break;
      case megatron_dtype::uint16: scan(std::uint16_t{}); break;
      case megatron_dtype::int32: scan(std::int32_t{}); break;
      case megatron_dtype::int64: scan(std::int64_t{}); break;
      default: break;
    }
  }
  [[noreturn]] void bad_token(std::uint64_t at, std::int64_t v) const {
    // Which sequence holds token `at` (pointers are contiguous: a binary search over them).
    std::uint64_t lo = 0, hi = sequences_;
    while (hi - lo > 1) {
      const std::uint64_t mid = lo + (hi - lo) / 2;
      if (pointer(mid) / item_ <= at) lo = mid;
      else hi = mid;
    }
    detail::fail("Megatron data file '", data_path(prefix_).string(), "': token ", v, " (sequence ", lo, ", position ", at - pointer(lo) / item_,
                 ") is ", v < 0 ? "negative" : "past the int32 range", ": tokens must be in [0, 2^31)");
  }
};

}  // namespace nn
MXKIT_END_NAMESPACE
