// SPDX-License-Identifier: Apache-2.0
#pragma once
// safetensors files (Hugging Face's format, github.com/huggingface/safetensors, README "Format"),
// and a model's weights under the Hugging Face Llama tensor names.
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
// Hugging Face Llama names (transformers' LlamaForCausalLM): mxkit's fused projections are split
// on export and fused on import; both store linear weights [out, in] (torch.nn.Linear's layout,
// mxkit's W[N, K]), so rows are copied as they are:
//   embedding.weight             model.embed_tokens.weight                       [V, C]
//   layers.i.norm1.weight        model.layers.i.input_layernorm.weight           [C]  (mxkit (1, C))
//   layers.i.qkv.weight          model.layers.i.self_attn.{q,k,v}_proj.weight    rows [q | k | v]
//   layers.i.out.weight          model.layers.i.self_attn.o_proj.weight
//   layers.i.norm2.weight        model.layers.i.post_attention_layernorm.weight  [C]
//   layers.i.gate_up.weight      model.layers.i.mlp.{gate,up}_proj.weight        rows [gate | up]
//   layers.i.down.weight         model.layers.i.mlp.down_proj.weight
//   final_norm.weight            model.norm.weight                               [C]
//   head.weight                  lm_head.weight                                  [V, C]
// RoPE: mxkit rotates the halves (v[i], v[i + D/2]) of each head (nn/rope.hpp), which is
// transformers' rotate_half convention, so q and k rows need no permutation (the permutation in
// transformers' convert_llama_weights_to_hf.py maps Meta's interleaved pairs to halves).
// Export writes __metadata__ {"format": "pt"} (what transformers' loader expects) and the model's
// shape as "mxkit.*" entries; import checks those entries against the model where present.
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
#include <mxkit/format/bits.hpp>
#include <mxkit/format/float16.hpp>
#include <mxkit/io/file_io.hpp>
#include <mxkit/nn/model.hpp>

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

inline bool valid_utf8(std::string_view s) noexcept {
  for (std::size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c < 0x80) {
      ++i;
      continue;
    }
    const std::size_t n = (c >> 5) == 0x6 ? 1 : (c >> 4) == 0xE ? 2 : (c >> 3) == 0x1E ? 3 : 0;  // continuation bytes
    if (n == 0 || i + n >= s.size()) return false;
    std::uint32_t cp = c & (0x3Fu >> n);
    for (std::size_t k = 1; k <= n; ++k) {
      const auto d = static_cast<unsigned char>(s[i + k]);
      if ((d >> 6) != 0x2) return false;
      cp = (cp << 6) | (d & 0x3Fu);
    }
    // Overlong forms, surrogates and code points past U+10FFFF are not UTF-8 (RFC 3629).
    if ((n == 1 && cp < 0x80) || (n == 2 && cp < 0x800) || (n == 3 && cp < 0x10000) || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
      return false;
    i += n + 1;
  }
  return true;
}

// A JSON reader for the header's grammar only (RFC 8259 strings, objects, arrays of unsigned
// integers); anything else in the header is an error naming the byte offset.
class json_reader {
 public:
  explicit json_reader(std::string_view s) : s_(s) {}
  void space() {
    while (p_ < s_.size() && (s_[p_] == ' ' || s_[p_] == '\t' || s_[p_] == '\n' || s_[p_] == '\r')) ++p_;
  }
  bool at_end() {
    space();
    return p_ == s_.size();
  }
  bool next_is(char c) {
    space();
    return p_ < s_.size() && s_[p_] == c;
  }
  void expect(char c, const char* what) {
    if (!next_is(c)) error(std::string("expected ") + what);
    ++p_;
  }
  std::string string() {
    expect('"', "a string");
    std::string out;
    while (true) {
      if (p_ >= s_.size()) error("unterminated string");
      const char c = s_[p_++];
      if (c == '"') return out;
      if (static_cast<unsigned char>(c) < 0x20) error("a control character inside a string");
      if (c != '\\') {
        out += c;
        continue;
      }
      if (p_ >= s_.size()) error("unterminated escape");
      switch (const char e = s_[p_++]) {
        case '"': case '\\': case '/': out += e; break;
        case 'b': out += '\b'; break;
        case 'f': out += '\f'; break;
        case 'n': out += '\n'; break;
        case 'r': out += '\r'; break;
        case 't': out += '\t'; break;
        case 'u': {
          std::uint32_t cp = hex4();
          if (cp >= 0xD800 && cp <= 0xDBFF) {  // a surrogate pair
            if (s_.substr(p_, 2) != "\\u") error("a lone high surrogate");
            p_ += 2;
            const std::uint32_t lo = hex4();
            if (lo < 0xDC00 || lo > 0xDFFF) error("a high surrogate without its low surrogate");
            cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
          } else if (cp >= 0xDC00 && cp <= 0xDFFF) {
            error("a lone low surrogate");
          }
          utf8(cp, out);
          break;
        }
        default: error(std::string("unknown escape '\\") + e + "'");
      }
    }
  }
  std::uint64_t unsigned_integer() {
    space();
    const std::size_t start = p_;
    std::uint64_t v = 0;
    while (p_ < s_.size() && s_[p_] >= '0' && s_[p_] <= '9') {
      const auto d = static_cast<std::uint64_t>(s_[p_] - '0');
      if (v > (~std::uint64_t{0} - d) / 10) error("an integer larger than 2^64 - 1");
      v = v * 10 + d;
      ++p_;
    }
    if (p_ == start) error("expected an unsigned integer");
    if (p_ - start > 1 && s_[start] == '0') error("an integer with a leading zero");
    if (p_ < s_.size() && (s_[p_] == '.' || s_[p_] == 'e' || s_[p_] == 'E')) error("a number that is not an integer");
    return v;
  }
  std::vector<std::uint64_t> integer_array() {
    expect('[', "'[' (an array of integers)");
    std::vector<std::uint64_t> out;
    if (next_is(']')) {
      ++p_;
      return out;
    }
    while (true) {
      out.push_back(unsigned_integer());
      if (out.size() > 1024) error("an array of more than 1024 integers");
      if (next_is(']')) {
        ++p_;
        return out;
      }
      expect(',', "',' or ']'");
    }
  }
  // Calls f(key) for each key of an object; f reads the value. Duplicate keys are refused.
  template <class F>
  void object(F&& f) {
    expect('{', "'{'");
    std::vector<std::string> keys;
    if (next_is('}')) {
      ++p_;
      return;
    }
    while (true) {
      std::string key = string();
      if (std::find(keys.begin(), keys.end(), key) != keys.end()) error("the key \"" + key + "\" appears twice in one object");
      expect(':', "':'");
      f(key);
      keys.push_back(std::move(key));
      if (next_is('}')) {
        ++p_;
        return;
      }
      expect(',', "',' or '}'");
    }
  }
  [[noreturn]] void error(const std::string& what) const {
    bad("header JSON at byte " + std::to_string(p_) + ": " + what);
  }

 private:
  std::uint32_t hex4() {
    if (s_.size() - p_ < 4) error("a truncated \\u escape");
    std::uint32_t v = 0;
    for (int i = 0; i < 4; ++i) {
      const char c = s_[p_++];
      const int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
      if (d < 0) error("a \\u escape with a non-hex digit");
      v = v * 16 + static_cast<std::uint32_t>(d);
    }
    return v;
  }
  static void utf8(std::uint32_t cp, std::string& out) {
    if (cp < 0x80) {
      out += static_cast<char>(cp);
    } else if (cp < 0x800) {
      out += static_cast<char>(0xC0 | (cp >> 6));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
      out += static_cast<char>(0xE0 | (cp >> 12));
      out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    } else {
      out += static_cast<char>(0xF0 | (cp >> 18));
      out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
      out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    }
  }
  std::string_view s_;
  std::size_t p_ = 0;
};

inline std::string json_string(std::string_view s) {
  std::string out = "\"";
  for (const char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      constexpr char hex[] = "0123456789abcdef";
      out += "\\u00";
      out += hex[(c >> 4) & 0xF];
      out += hex[c & 0xF];
    } else {
      out += c;
    }
  }
  return out + "\"";
}

inline std::uint64_t get_u64_le(const std::uint8_t* p) noexcept {
  std::uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= std::uint64_t{p[i]} << (8 * i);
  return v;
}

}  // namespace safetensors_detail

// Parses and validates the N header bytes of a file whose byte buffer has data_bytes bytes (none:
// unknown, e.g. a pipe; then the buffer is taken to end where the last tensor does).
inline safetensors_header parse_safetensors_header(std::string_view json, std::optional<std::uint64_t> data_bytes) {
  using safetensors_detail::bad;
  if (json.empty() || json.front() != '{') bad("the header does not start with '{'");
  if (!safetensors_detail::valid_utf8(json)) bad("the header is not valid UTF-8");
  safetensors_header h;
  h.header_bytes = json.size();
  safetensors_detail::json_reader r(json);
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
  using safetensors_detail::json_string;
  std::string json = "{";
  if (!metadata.empty()) {
    json += "\"__metadata__\":{";
    bool first = true;
    for (const auto& [k, v] : metadata) {
      if (!first) json += ',';
      json += json_string(k);
      json += ':';
      json += json_string(v);
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
    json += json_string(t.name);
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

// A file as bytes: the 8-byte size and header first, checked before the rest is read, so a
// foreign, huge or endless file (/dev/zero) costs a header read. Throws safetensors_error naming
// the file.
struct safetensors_file {
  safetensors_header header;
  std::vector<std::uint8_t> data;  // the byte buffer
  std::vector<float> values(const safetensors_entry& e) const { return safetensors_values(data.data(), e); }
};

inline safetensors_file read_safetensors(const std::filesystem::path& path) {
  const std::string prefix = "safetensors '" + path.string() + "': ";
  try {
    std::optional<detail::input_file> in;
    try {
      in.emplace(path);
    } catch (const std::system_error& e) {
      throw safetensors_error(e.what());
    }
    if (in->is_directory()) throw safetensors_error("is a directory");
    const std::optional<std::uint64_t> size = in->regular_size();
    std::uint8_t head[8];
    const std::size_t got = in->read(head, 8);
    if (got < 8) throw safetensors_error("truncated: " + std::to_string(got) + " bytes, less than the 8-byte header size");
    const std::uint64_t n = safetensors_detail::get_u64_le(head);
    if (n > safetensors_max_header_bytes)
      throw safetensors_error("header size " + std::to_string(n) + " exceeds the limit of " + std::to_string(safetensors_max_header_bytes) +
                              " bytes");
    if (size && n > *size - 8)
      throw safetensors_error("truncated: the header size is " + std::to_string(n) + " bytes, the file has " + std::to_string(*size - 8) +
                              " after it");
    std::string json(static_cast<std::size_t>(n), '\0');
    if (in->read(json.data(), json.size()) < json.size()) throw safetensors_error("truncated inside the header");
    safetensors_file f;
    f.header = parse_safetensors_header(json, size ? std::optional<std::uint64_t>(*size - 8 - n) : std::nullopt);
    // In chunks: a pipe's header may promise more than it sends, and memory grows only with the
    // bytes that arrive.
    constexpr std::uint64_t chunk = std::uint64_t{1} << 24;
    for (std::uint64_t at = 0; at < f.header.data_bytes;) {
      const auto n_chunk = static_cast<std::size_t>(std::min(chunk, f.header.data_bytes - at));
      f.data.resize(static_cast<std::size_t>(at) + n_chunk);
      if (in->read(f.data.data() + at, n_chunk) < n_chunk) throw safetensors_error("truncated inside the data");
      at += n_chunk;
    }
    std::uint8_t extra = 0;
    if (in->read(&extra, 1) != 0) throw safetensors_error("unexpected bytes after the last tensor");
    return f;
  } catch (const safetensors_error& e) {
    throw safetensors_error(prefix + e.what());
  } catch (const std::system_error& e) {
    throw safetensors_error(prefix + e.what());
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

// ---- the model under Hugging Face Llama names ---------------------------------------------------

// One Hugging Face tensor: rows [row0, row0 + rows) of an mxkit parameter; `vector`: stored 1-D.
struct hf_llama_tensor {
  std::string name;
  parameter* p;
  std::size_t row0, rows;
  bool vector;
};

inline std::vector<hf_llama_tensor> hf_llama_layout(model& m) {
  const layer_config& c = m.config().layer;
  const std::size_t q = c.n_heads * c.head_dim(), kv = c.n_kv_heads * c.head_dim(), F = c.d_ff;
  std::vector<hf_llama_tensor> out;
  auto whole = [&](std::string name, parameter& p, bool vector = false) { out.push_back({std::move(name), &p, 0, p.rows(), vector}); };
  whole("model.embed_tokens.weight", m.token_embedding().table());
  for (std::size_t i = 0; i < m.layers().size(); ++i) {
    transformer_layer& l = m.layers()[i];
    const std::string pre = "model.layers." + std::to_string(i) + ".";
    whole(pre + "input_layernorm.weight", l.norm1().weight(), true);
    parameter& qkv = l.qkv().weight();
    out.push_back({pre + "self_attn.q_proj.weight", &qkv, 0, q, false});
    out.push_back({pre + "self_attn.k_proj.weight", &qkv, q, kv, false});
    out.push_back({pre + "self_attn.v_proj.weight", &qkv, q + kv, kv, false});
    whole(pre + "self_attn.o_proj.weight", l.out().weight());
    whole(pre + "post_attention_layernorm.weight", l.norm2().weight(), true);
    parameter& gu = l.gate_up().weight();
    out.push_back({pre + "mlp.gate_proj.weight", &gu, 0, F, false});
    out.push_back({pre + "mlp.up_proj.weight", &gu, F, F, false});
    whole(pre + "mlp.down_proj.weight", l.down().weight());
  }
  whole("model.norm.weight", m.final_norm().weight(), true);
  whole("lm_head.weight", m.head().weight());
  for (const hf_llama_tensor& t : out)
    detail::require(t.p->value.defined(), "safetensors: parameter '", t.p->name, "' has no master copy (a quantized-only weight)");
  return out;
}

// The model's shape as __metadata__ entries ("mxkit.<field>": decimal text).
inline std::map<std::string, std::string> hf_llama_metadata(const model& m) {
  const model_config& c = m.config();
  auto text = [](double x) {
    char b[32];
    std::snprintf(b, sizeof b, "%.17g", x);
    return std::string(b);
  };
  return {{"format", "pt"},
          {"mxkit.vocab", std::to_string(c.vocab)},
          {"mxkit.n_layers", std::to_string(c.n_layers)},
          {"mxkit.d_model", std::to_string(c.layer.d_model)},
          {"mxkit.n_heads", std::to_string(c.layer.n_heads)},
          {"mxkit.n_kv_heads", std::to_string(c.layer.n_kv_heads)},
          {"mxkit.d_ff", std::to_string(c.layer.d_ff)},
          {"mxkit.rope_theta", text(c.layer.rope_theta)},
          {"mxkit.norm_eps", text(c.layer.norm_eps)}};
}

// The model's weights (master copies) under Hugging Face Llama names, F32 (bit-exact) or BF16
// (rounded to nearest even).
inline void export_safetensors(const std::filesystem::path& path, model& m, safetensors_dtype dtype = safetensors_dtype::f32) {
  std::vector<safetensors_tensor> tensors;
  std::map<parameter*, std::vector<double>> values;
  for (const hf_llama_tensor& t : hf_llama_layout(m)) {
    auto it = values.find(t.p);
    if (it == values.end()) it = values.emplace(t.p, m.be().read(t.p->value)).first;
    const std::size_t cols = t.p->cols();
    safetensors_tensor s{t.name, {}, {}};
    s.shape = t.vector ? std::vector<std::uint64_t>{cols} : std::vector<std::uint64_t>{t.rows, cols};
    s.values.assign(it->second.begin() + static_cast<std::ptrdiff_t>(t.row0 * cols),
                    it->second.begin() + static_cast<std::ptrdiff_t>((t.row0 + t.rows) * cols));
    tensors.push_back(std::move(s));
  }
  write_safetensors(path, tensors, dtype, hf_llama_metadata(m));
}

// Loads the model's weights from a Hugging Face Llama safetensors file (F32 or BF16). Every
// tensor of the model must be present with its shape and no other tensor may be; "mxkit.*"
// metadata, where present, must match the model. Nothing is written unless all of it checks.
// Optimizer state is not part of the file (start a fresh AdamW). Throws safetensors_error.
inline void import_safetensors(const std::filesystem::path& path, model& m) {
  const safetensors_file f = read_safetensors(path);
  const std::string prefix = "safetensors '" + path.string() + "': ";
  auto bad = [&](const std::string& why) { throw safetensors_error(prefix + why); };
  for (const auto& [key, value] : hf_llama_metadata(m))
    if (key.rfind("mxkit.", 0) == 0)
      if (auto it = f.header.metadata.find(key); it != f.header.metadata.end() && it->second != value)
        bad("metadata " + key + " is " + it->second + ", the model has " + value);
  const std::vector<hf_llama_tensor> layout = hf_llama_layout(m);
  for (const safetensors_entry& e : f.header.tensors)
    if (std::none_of(layout.begin(), layout.end(), [&](const hf_llama_tensor& t) { return t.name == e.name; }))
      bad("tensor '" + e.name + "' is not a weight of this model (a Llama of " + std::to_string(m.config().n_layers) + " layers)");
  std::map<parameter*, std::vector<double>> values;
  for (const hf_llama_tensor& t : layout) {
    const safetensors_entry* e = f.header.find(t.name);
    if (!e) bad("no tensor '" + t.name + "'");
    const std::size_t cols = t.p->cols();
    const std::vector<std::uint64_t> want = t.vector ? std::vector<std::uint64_t>{cols} : std::vector<std::uint64_t>{t.rows, cols};
    if (e->shape != want) {
      auto text = [](const std::vector<std::uint64_t>& s) {
        std::string r = "[";
        for (std::size_t i = 0; i < s.size(); ++i) r += (i ? ", " : "") + std::to_string(s[i]);
        return r + "]";
      };
      bad("tensor '" + t.name + "' has shape " + text(e->shape) + ", the model needs " + text(want));
    }
    std::vector<double>& v = values[t.p];
    v.resize(t.p->value.size());
    const std::vector<float> x = f.values(*e);
    std::copy(x.begin(), x.end(), v.begin() + static_cast<std::ptrdiff_t>(t.row0 * cols));
  }
  for (auto& [p, v] : values) {
    m.be().write(p->value, v);
    ++p->version;  // every quantized copy is stale now
  }
}

}  // namespace nn
MXKIT_END_NAMESPACE
