// SPDX-License-Identifier: Apache-2.0
// Writers of the token dataset formats for the tests (good files, and their bytes to damage):
// Megatron's .idx/.bin pair as megatron/core/datasets/indexed_dataset.py's _IndexWriter lays it
// out, and .npy arrays as numpy/lib/format.py does. One definition, shared by the files that one
// unity build compiles together.
#pragma once

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "../io/temp_files.hpp"

namespace train_test {

using bytes = std::vector<std::uint8_t>;

template <class T>
void put(bytes& b, T v) {
  std::uint8_t raw[sizeof(T)];
  std::memcpy(raw, &v, sizeof v);  // (little-endian test hosts)
  b.insert(b.end(), raw, raw + sizeof v);
}

// A Megatron dataset's two files.
struct megatron_files {
  bytes idx, bin;
  void write(const std::filesystem::path& prefix) const {
    nn_test::write_all(prefix.string() + ".idx", idx);
    nn_test::write_all(prefix.string() + ".bin", bin);
  }
};

inline std::size_t dtype_size(std::uint8_t code) {
  constexpr std::size_t sizes[] = {0, 1, 1, 2, 4, 8, 8, 4, 2};
  return code < 9 ? sizes[code] : 4;
}

// Sequences of tokens in the dtype of `code`, document indices `docs` (default: one sequence per
// document, 0 .. n), sequence modes appended when `modes`.
inline megatron_files megatron(const std::vector<std::vector<std::int64_t>>& sequences, std::uint8_t code = 4,
                               std::vector<std::int64_t> docs = {}, bool modes = false) {
  megatron_files f;
  if (docs.empty())
    for (std::size_t i = 0; i <= sequences.size(); ++i) docs.push_back(static_cast<std::int64_t>(i));
  const std::size_t item = dtype_size(code);
  std::vector<std::int64_t> pointers;
  for (const auto& s : sequences) {
    pointers.push_back(static_cast<std::int64_t>(f.bin.size()));
    for (std::int64_t v : s) {
      switch (item) {
        case 1: put(f.bin, static_cast<std::uint8_t>(v)); break;
        case 2: put(f.bin, static_cast<std::uint16_t>(v)); break;
        case 4: put(f.bin, static_cast<std::uint32_t>(v)); break;
        default: put(f.bin, static_cast<std::uint64_t>(v)); break;
      }
    }
  }
  const char magic[] = "MMIDIDX\0\0";
  f.idx.insert(f.idx.end(), magic, magic + 9);
  put<std::uint64_t>(f.idx, 1);
  put<std::uint8_t>(f.idx, code);
  put<std::uint64_t>(f.idx, sequences.size());
  put<std::uint64_t>(f.idx, docs.size());
  for (const auto& s : sequences) put<std::int32_t>(f.idx, static_cast<std::int32_t>(s.size()));
  for (std::int64_t p : pointers) put<std::int64_t>(f.idx, p);
  for (std::int64_t d : docs) put<std::int64_t>(f.idx, d);
  if (modes)
    for (std::size_t i = 0; i < sequences.size(); ++i) put<std::int8_t>(f.idx, 0);
  return f;
}

// Byte offsets of the .idx fields of a dataset of `s` sequences.
struct idx_layout {
  std::size_t s;
  std::size_t version() const { return 9; }
  std::size_t dtype() const { return 17; }
  std::size_t sequence_count() const { return 18; }
  std::size_t length(std::size_t i) const { return 34 + 4 * i; }
  std::size_t pointer(std::size_t i) const { return 34 + 4 * s + 8 * i; }
  std::size_t document(std::size_t i) const { return 34 + 12 * s + 8 * i; }
};

template <class T>
void poke(bytes& b, std::size_t at, T v) {
  std::memcpy(b.data() + at, &v, sizeof v);
}

// An .npy file: `descr`, `shape`, the data's bytes, header version `major` (1, 2 or 3), and the
// header dict's text, which a test may replace whole.
inline bytes npy(const std::string& descr, const std::vector<std::uint64_t>& shape, const bytes& data, int major = 1, bool fortran = false,
                 std::string header = "") {
  if (header.empty()) {
    header = "{'descr': '" + descr + "', 'fortran_order': " + (fortran ? "True" : "False") + ", 'shape': (";
    for (std::size_t i = 0; i < shape.size(); ++i) header += std::to_string(shape[i]) + (shape.size() == 1 || i + 1 < shape.size() ? ", " : "");
    header += "), }";
  }
  const std::size_t preamble = major == 1 ? 10 : 12;
  while ((preamble + header.size() + 1) % 64 != 0) header += ' ';
  header += '\n';
  bytes b = {0x93, 'N', 'U', 'M', 'P', 'Y', static_cast<std::uint8_t>(major), 0};
  if (major == 1) put<std::uint16_t>(b, static_cast<std::uint16_t>(header.size()));
  else put<std::uint32_t>(b, static_cast<std::uint32_t>(header.size()));
  b.insert(b.end(), header.begin(), header.end());
  b.insert(b.end(), data.begin(), data.end());
  return b;
}

// Values as little-endian elements of `size` bytes.
inline bytes elements(const std::vector<std::int64_t>& values, std::size_t size) {
  bytes b;
  for (std::int64_t v : values) {
    switch (size) {
      case 1: put(b, static_cast<std::uint8_t>(v)); break;
      case 2: put(b, static_cast<std::uint16_t>(v)); break;
      case 4: put(b, static_cast<std::uint32_t>(v)); break;
      default: put(b, static_cast<std::uint64_t>(v)); break;
    }
  }
  return b;
}

}  // namespace train_test
