// SPDX-License-Identifier: Apache-2.0
#pragma once
// safetensors files (Hugging Face's format, github.com/huggingface/safetensors, README "Format");
// a model's weights under the Hugging Face Llama names are io/hf_llama.hpp.
//
// The format:
//   8 bytes    N, unsigned little-endian: the header's size
//   N bytes    a UTF-8 JSON object; it starts with '{' and may end in spaces (writers pad it to a
//              multiple of 8). One key per tensor:
//                "name": {"dtype": "F32", "shape": [2, 3], "data_offsets": [begin, end]}
//              and an optional "__metadata__": an object of string to string.
//   the rest   the byte buffer: tensor data, row-major, little-endian; offsets are relative to its
//              start. Every tensor's end - begin is its element count times its dtype's size, and
//              the tensors ordered by offset cover the buffer exactly: no overlap, no hole, nothing
//              after the last one (the reference implementation's validation).
// Refused with safetensors_error naming the problem: N above 100'000'000 (the reference
// implementation's limit) or past the end of the file, a header that is not such an object
// (bad JSON, invalid UTF-8, duplicate or unknown keys, a non-integer in a shape or offsets),
// dtypes other than F32 and BF16 (the only ones mxkit reads or writes), sizes that do not match,
// and offsets that overlap, leave holes, or do not end at the end of the file.
//
// Files are written atomically (file_io.hpp's replace_file).
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

#include <mxkit/config.hpp>
#include <mxkit/error.hpp>
#include <mxkit/format/bits.hpp>
#include <mxkit/format/float16.hpp>
#include <mxkit/file_io.hpp>
#include <mxkit/io/json_reader.hpp>

MXKIT_BEGIN_NAMESPACE
namespace nn {

class safetensors_error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

enum class safetensors_dtype : std::uint8_t { f32, bf16 };

inline constexpr std::uint64_t safetensors_max_header_bytes = 100'000'000;  // the reference implementation's limit

inline constexpr const char* safetensors_dtype_name(safetensors_dtype t) noexcept { return t == safetensors_dtype::f32 ? "F32" : "BF16"; }
inline constexpr std::size_t safetensors_dtype_size(safetensors_dtype t) noexcept { return t == safetensors_dtype::f32 ? 4 : 2; }

// One tensor of a parsed header; begin/end are relative to the byte buffer.
struct safetensors_entry {
  std::string name;
  safetensors_dtype dtype = safetensors_dtype::f32;
  std::vector<std::uint64_t> shape;
  std::uint64_t begin = 0, end = 0;
  std::uint64_t elements() const noexcept {
    std::uint64_t n = 1;
    for (std::uint64_t d : shape) n *= d;  // checked when parsed
    return n;
  }
};

struct safetensors_header {
  std::map<std::string, std::string> metadata;
  std::vector<safetensors_entry> tensors;  // ordered by offset
  std::uint64_t header_bytes = 0;          // N
  std::uint64_t data_bytes = 0;            // the byte buffer's size
  const safetensors_entry* find(std::string_view name) const {
    for (const safetensors_entry& e : tensors)
      if (e.name == name) return &e;
    return nullptr;
  }
};

// A tensor to write, values as floats (rounded to nearest even for BF16).
struct safetensors_tensor {
  std::string name;
  std::vector<std::uint64_t> shape;
  std::vector<float> values;
};

namespace safetensors_detail {

[[noreturn]] inline void bad(const std::string& why) { throw safetensors_error(why); }

inline std::uint64_t get_u64_le(const std::uint8_t* p) noexcept {
  std::uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= std::uint64_t{p[i]} << (8 * i);
  return v;
}

}  // namespace safetensors_detail

// Parses and validates the N header bytes of a file whose byte buffer has data_bytes bytes (none:
// unknown, e.g. a pipe; then the buffer is taken to end where the last tensor does).
// The JSON grammar's errors (io/json_reader.hpp) become safetensors_error with the same text.
inline safetensors_header parse_safetensors_header(std::string_view json, std::optional<std::uint64_t> data_bytes) try {
  using safetensors_detail::bad;
  if (json.empty() || json.front() != '{') bad("the header does not start with '{'");
  if (!json::valid_utf8(json)) bad("the header is not valid UTF-8");
  safetensors_header h;
  h.header_bytes = json.size();
  json::reader r(json);
  r.object([&](const std::string& key) {
    if (key == "__metadata__") {
      r.object([&](const std::string& k) { h.metadata[k] = r.string(); });
      return;
    }
    safetensors_entry e;
    e.name = key;
    bool has_dtype = false, has_shape = false, has_offsets = false;
    r.object([&](const std::string& field) {
      if (field == "dtype") {
        const std::string t = r.string();
        if (t == "F32") e.dtype = safetensors_dtype::f32;
        else if (t == "BF16") e.dtype = safetensors_dtype::bf16;
        else bad("tensor '" + key + "' has dtype \"" + t + "\"; mxkit reads F32 and BF16 only");
        has_dtype = true;
      } else if (field == "shape") {
        e.shape = r.integer_array();
        has_shape = true;
      } else if (field == "data_offsets") {
        const std::vector<std::uint64_t> o = r.integer_array();
        if (o.size() != 2) bad("tensor '" + key + "' has " + std::to_string(o.size()) + " data_offsets, not 2");
        e.begin = o[0];
        e.end = o[1];
        has_offsets = true;
      } else {
        bad("tensor '" + key + "' has an unknown field \"" + field + "\"");
      }
    });
    if (!has_dtype || !has_shape || !has_offsets)
      bad("tensor '" + key + "' lacks " + (!has_dtype ? "\"dtype\"" : !has_shape ? "\"shape\"" : "\"data_offsets\""));
    if (e.end < e.begin)
      bad("tensor '" + key + "' has data_offsets [" + std::to_string(e.begin) + ", " + std::to_string(e.end) + "] that end before they begin");
    std::uint64_t bytes = safetensors_dtype_size(e.dtype);
    for (std::uint64_t d : e.shape) {
      if (d != 0 && bytes > ~std::uint64_t{0} / d) bad("tensor '" + key + "': the shape's byte size overflows 64 bits");
      bytes *= d;
    }
    if (bytes != e.end - e.begin)
      bad("tensor '" + key + "': shape and dtype " + safetensors_dtype_name(e.dtype) + " need " + std::to_string(bytes) +
          " bytes, data_offsets span " + std::to_string(e.end - e.begin));
    h.tensors.push_back(std::move(e));
  });
  if (!r.at_end()) r.error("unexpected bytes after the header object");
  // A total order (names are unique), so std::sort is deterministic; std::stable_sort would pull
  // in std::get_temporary_buffer, which clang flags as deprecated in libstdc++ 12.
  std::sort(h.tensors.begin(), h.tensors.end(), [](const safetensors_entry& a, const safetensors_entry& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end != b.end ? a.end < b.end : a.name < b.name;
  });
  std::uint64_t at = 0;
  for (const safetensors_entry& e : h.tensors) {
    if (e.begin != at)
      bad(std::string("tensor '") + e.name + "' starts at byte " + std::to_string(e.begin) + " of the data where the previous ends at " +
          std::to_string(at) + (e.begin < at ? " (overlapping tensors)" : " (a hole in the data)"));
    at = e.end;
  }
  if (data_bytes && *data_bytes != at)
    bad("the tensors cover " + std::to_string(at) + " bytes of data, the file has " + std::to_string(*data_bytes) +
        (*data_bytes < at ? " (truncated)" : " (unexpected bytes after the last tensor)"));
  h.data_bytes = at;
  return h;
} catch (const json::error& e) {
  throw safetensors_error(e.what());
}

// Parses a whole file in memory.
inline safetensors_header parse_safetensors(const std::uint8_t* file, std::size_t size) {
  if (size < 8) safetensors_detail::bad("truncated: " + std::to_string(size) + " bytes, less than the 8-byte header size");
  const std::uint64_t n = safetensors_detail::get_u64_le(file);
  if (n > safetensors_max_header_bytes)
    safetensors_detail::bad("header size " + std::to_string(n) + " exceeds the limit of " + std::to_string(safetensors_max_header_bytes) + " bytes");
  if (n > size - 8)
    safetensors_detail::bad("truncated: the header size is " + std::to_string(n) + " bytes, the file has " + std::to_string(size - 8) +
                            " after it");
  return parse_safetensors_header(std::string_view(reinterpret_cast<const char*>(file) + 8, static_cast<std::size_t>(n)),
                                  size - 8 - n);
}

// The values of one tensor of a file parsed by parse_safetensors, as floats (BF16 widened exactly).
inline std::vector<float> safetensors_values(const std::uint8_t* data, const safetensors_entry& e) {
  const std::size_t n = static_cast<std::size_t>(e.elements());
  std::vector<float> out(n);
  const std::uint8_t* p = data + e.begin;
  for (std::size_t i = 0; i < n; ++i) {
    if (e.dtype == safetensors_dtype::f32) {
      std::uint32_t b = 0;
      for (int k = 0; k < 4; ++k) b |= std::uint32_t{p[4 * i + static_cast<std::size_t>(k)]} << (8 * k);
      out[i] = bit_cast<float>(b);
    } else {
      const auto b = static_cast<std::uint32_t>(p[2 * i] | (p[2 * i + 1] << 8));
      out[i] = bit_cast<float>(b << 16);
    }
  }
  return out;
}

// A whole file's bytes: header padded with spaces to a multiple of 8 (the reference writer's
// alignment), tensors in the given order.
inline std::vector<std::uint8_t> encode_safetensors(const std::vector<safetensors_tensor>& tensors, safetensors_dtype dtype,
                                                    const std::map<std::string, std::string>& metadata = {}) {
  std::string json = "{";
  if (!metadata.empty()) {
    json += "\"__metadata__\":{";
    bool first = true;
    for (const auto& [k, v] : metadata) {
      if (!first) json += ',';
      json += json::quoted(k);
      json += ':';
      json += json::quoted(v);
      first = false;
    }
    json += "}";
  }
  std::uint64_t at = 0;
  const std::size_t size = safetensors_dtype_size(dtype);
  for (const safetensors_tensor& t : tensors) {
    detail::require(t.name != "__metadata__", "safetensors: a tensor cannot be named __metadata__");
    std::uint64_t n = 1;
    std::string shape;
    for (std::uint64_t d : t.shape) {
      n *= d;
      if (!shape.empty()) shape += ',';
      shape += std::to_string(d);
    }
    detail::require(n == t.values.size(), "safetensors: tensor '", t.name, "' has ", t.values.size(), " values for ", n, " elements");
    if (json.size() > 1) json += ',';
    json += json::quoted(t.name);
    json += ":{\"dtype\":\"";
    json += safetensors_dtype_name(dtype);
    json += "\",\"shape\":[";
    json += shape;
    json += "],\"data_offsets\":[";
    json += std::to_string(at);
    json += ',';
    json += std::to_string(at + n * size);
    json += "]}";
    at += n * size;
  }
  json += "}";
  json.append((8 - json.size() % 8) % 8, ' ');
  std::vector<std::uint8_t> out;
  out.reserve(8 + json.size() + static_cast<std::size_t>(at));
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<std::uint8_t>(static_cast<std::uint64_t>(json.size()) >> (8 * i)));
  for (const char c : json) out.push_back(static_cast<std::uint8_t>(c));
  for (const safetensors_tensor& t : tensors)
    for (float v : t.values) {
      const std::uint32_t b = dtype == safetensors_dtype::f32 ? bit_cast<std::uint32_t>(v)
                                                              : bfloat16::from_float(v, rounding::nearest_even, overflow::propagate).bits();
      for (std::size_t k = 0; k < size; ++k) out.push_back(static_cast<std::uint8_t>(b >> (8 * k)));
    }
  return out;
}

// A file's header, read first on its own (the 8-byte size, then the JSON), so a foreign, huge or
// endless file (/dev/zero) costs a header read. `in` is at byte 0; it is left at the first byte of
// the data. A regular file's size is checked against the header (data_bytes: what it holds).
namespace safetensors_detail {
inline safetensors_header read_header(detail::input_file& in) {
  if (in.is_directory()) throw safetensors_error("is a directory");
  const std::optional<std::uint64_t> size = in.regular_size();
  std::uint8_t head[8];
  const std::size_t got = in.read(head, 8);
  if (got < 8) throw safetensors_error("truncated: " + std::to_string(got) + " bytes, less than the 8-byte header size");
  const std::uint64_t n = get_u64_le(head);
  if (n > safetensors_max_header_bytes)
    throw safetensors_error("header size " + std::to_string(n) + " exceeds the limit of " + std::to_string(safetensors_max_header_bytes) +
                            " bytes");
  if (size && n > *size - 8)
    throw safetensors_error("truncated: the header size is " + std::to_string(n) + " bytes, the file has " + std::to_string(*size - 8) +
                            " after it");
  std::string json(static_cast<std::size_t>(n), '\0');
  if (in.read(json.data(), json.size()) < json.size()) throw safetensors_error("truncated inside the header");
  return parse_safetensors_header(json, size ? std::optional<std::uint64_t>(*size - 8 - n) : std::nullopt);
}
}  // namespace safetensors_detail

// A file as bytes: the header first (above), then the data. Throws safetensors_error naming the
// file.
struct safetensors_file {
  safetensors_header header;
  std::vector<std::uint8_t> data;  // the byte buffer
  std::vector<float> values(const safetensors_entry& e) const { return safetensors_values(data.data(), e); }
};

inline safetensors_file read_safetensors(const std::filesystem::path& path) {
  const std::string prefix = "safetensors '" + path.string() + "': ";
  try {
    detail::input_file in(path);  // its system_error is named below, as any other
    safetensors_file f;
    f.header = safetensors_detail::read_header(in);
    // In chunks: a pipe's header may promise more than it sends, and memory grows only with the
    // bytes that arrive.
    constexpr std::uint64_t chunk = std::uint64_t{1} << 24;
    for (std::uint64_t at = 0; at < f.header.data_bytes;) {
      const auto n_chunk = static_cast<std::size_t>(std::min(chunk, f.header.data_bytes - at));
      f.data.resize(static_cast<std::size_t>(at) + n_chunk);
      if (in.read(f.data.data() + at, n_chunk) < n_chunk) throw safetensors_error("truncated inside the data");
      at += n_chunk;
    }
    std::uint8_t extra = 0;
    if (in.read(&extra, 1) != 0) throw safetensors_error("unexpected bytes after the last tensor");
    return f;
  } catch (const safetensors_error& e) {
    throw safetensors_error(prefix + e.what());
  } catch (const std::system_error& e) {
    throw safetensors_error(prefix + e.what());
  }
}

// The header of a regular file only, for readers of parts of its data (io/hf_sharded.hpp): the
// file's size must be the header's 8 + N + data bytes (so every tensor the header lists is there
// to read). Throws safetensors_error naming the file.
inline safetensors_header read_safetensors_header(const std::filesystem::path& path) {
  try {
    detail::input_file in(path);  // its system_error is named below, as any other
    if (!in.is_directory() && !in.regular_size())
      throw safetensors_error("is not a regular file (a device or pipe); a shard is read in parts, from its size");
    return safetensors_detail::read_header(in);
  } catch (const safetensors_error& e) {
    throw safetensors_error("safetensors '" + path.string() + "': " + e.what());
  } catch (const std::system_error& e) {
    throw safetensors_error("safetensors '" + path.string() + "': " + e.what());
  }
}

inline void write_safetensors(const std::filesystem::path& path, const std::vector<safetensors_tensor>& tensors, safetensors_dtype dtype,
                              const std::map<std::string, std::string>& metadata = {}) {
  const std::vector<std::uint8_t> bytes = encode_safetensors(tensors, dtype, metadata);
  try {
    detail::replace_file(path, bytes.data(), bytes.size());
  } catch (const std::system_error& e) {
    throw safetensors_error("safetensors '" + path.string() + "': " + e.what());
  }
}

}  // namespace nn
MXKIT_END_NAMESPACE
