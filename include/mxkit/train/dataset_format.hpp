// SPDX-License-Identifier: Apache-2.0
#pragma once
// Which kind of training data a path names, told from the files' content, not their names:
//   megatron  a Megatron indexed dataset (indexed_dataset.hpp), named by its prefix as Megatron
//             names it (PREFIX, with PREFIX.idx and PREFIX.bin beside), or by either file: the
//             index is recognized by its magic "MMIDIDX\0\0"; a .bin, which has no magic, by the
//             index beside it
//   packed    a NumPy .npy array (packed_dataset.hpp), by its magic "\x93NUMPY"
//   text      anything else: bytes (train/data.hpp)
// A name is used only to refuse what would otherwise be read wrongly: a file named .idx or .npy
// that lacks the magic is still taken for that format, so that its reader refuses it and says
// why (bad magic) instead of training on its bytes; a file named .bin with no PREFIX.idx beside it
// is refused (a Megatron data file without its index), not read as text.
#include <cstddef>
#include <cstring>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>

#include <mxkit/error.hpp>
#include <mxkit/file_io.hpp>
#include <mxkit/train/indexed_dataset.hpp>
#include <mxkit/train/npy.hpp>

MXKIT_BEGIN_NAMESPACE
namespace nn {

enum class dataset_kind { text, megatron, packed };

struct dataset_location {
  dataset_kind kind = dataset_kind::text;
  std::filesystem::path path;  // megatron: the prefix; otherwise the file
};

namespace format_detail {
inline bool ends_with(const std::string& s, std::string_view tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}
// The first bytes of a regular file (fewer when it is shorter), or nullopt when it is not one.
inline std::optional<std::string> head(const std::filesystem::path& p, std::size_t n) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(p, ec)) return std::nullopt;
  try {
    detail::input_file in(p);
    std::string s(n, '\0');
    s.resize(in.read(s.data(), n));
    return s;
  } catch (const std::system_error&) {
    return std::nullopt;  // (the reader opening it reports the reason)
  }
}
inline bool starts_with(const std::optional<std::string>& s, std::string_view magic) {
  return s && s->size() >= magic.size() && std::memcmp(s->data(), magic.data(), magic.size()) == 0;
}
}  // namespace format_detail

// `role` names the path in messages (a flag: "--data").
inline dataset_location detect_dataset(const std::filesystem::path& path, const std::string& role = "dataset") {
  using namespace format_detail;
  const std::string s = path.string(), quoted = role + " '" + s + "'";
  std::error_code ec;
  const std::optional<std::string> start = head(path, 9);
  if (!std::filesystem::exists(path, ec)) {
    // A prefix: PREFIX.idx or PREFIX.bin exists (the reader names the one that is missing).
    if (std::filesystem::exists(indexed_dataset::index_path(path), ec) || std::filesystem::exists(indexed_dataset::data_path(path), ec))
      return {dataset_kind::megatron, path};
    detail::fail(quoted, " does not exist (nor does a Megatron dataset of that prefix, '", s, ".idx' and '", s, ".bin')");
  }
  if (starts_with(start, megatron_index_magic) || (start && ends_with(s, ".idx"))) {
    detail::require(ends_with(s, ".idx"), quoted, " is a Megatron index, but its name does not end in .idx: Megatron names the pair PREFIX.idx and "
                    "PREFIX.bin; rename it so that its data file can be found");
    return {dataset_kind::megatron, s.substr(0, s.size() - 4)};
  }
  if (starts_with(start, npy_magic) || (start && ends_with(s, ".npy"))) return {dataset_kind::packed, path};
  if (start && ends_with(s, ".bin")) {
    const std::string prefix = s.substr(0, s.size() - 4);
    detail::require(std::filesystem::exists(indexed_dataset::index_path(prefix), ec), quoted,
                    " is named like a Megatron data file, but there is no index '", prefix,
                    ".idx' beside it (a .bin has no header: its index says what it holds); to train on its bytes as text, rename it");
    return {dataset_kind::megatron, prefix};
  }
  return {dataset_kind::text, path};
}

inline const char* dataset_kind_name(dataset_kind k) noexcept {
  switch (k) {
    case dataset_kind::megatron: return "Megatron indexed dataset";
    case dataset_kind::packed: return "packed .npy";
    case dataset_kind::text: break;
  }
  return "text (bytes)";
}

}  // namespace nn
MXKIT_END_NAMESPACE
