// SPDX-License-Identifier: Apache-2.0
#pragma once
// The small JSON reader and writer the file formats need (io/safetensors.hpp: a safetensors
// header, a Hugging Face index file): RFC 8259 strings with their escapes, objects, arrays of
// unsigned integers, checked UTF-8 (RFC 3629). Not a general JSON library: anything outside that
// grammar is refused with json::error naming the byte offset, which the formats turn into their
// own errors.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include <mxkit/config.hpp>

MXKIT_BEGIN_NAMESPACE
namespace nn {
namespace json {

class error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

[[noreturn]] inline void fail(const std::string& why) { throw error(why); }

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

// A JSON reader for the grammar safetensors headers and their index files use (RFC 8259 strings,
// objects, arrays of unsigned integers); anything else is a json::error naming the byte offset.
class reader {
 public:
  // `what` names the text in errors ("header JSON", "index JSON").
  explicit reader(std::string_view s, const char* what = "header JSON") : s_(s), what_(what) {}
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
    fail(std::string(what_) + " at byte " + std::to_string(p_) + ": " + what);
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
  const char* what_;
  std::size_t p_ = 0;
};

inline std::string quoted(std::string_view s) {
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

}  // namespace json
}  // namespace nn
MXKIT_END_NAMESPACE
