// SPDX-License-Identifier: Apache-2.0
#pragma once
// A NumPy .npy array, memory-mapped, its header parsed here (no Python). The format, as NumPy's
// numpy/lib/format.py documents it (the NEP 1 "A Simple File Format for NumPy Arrays"):
//   magic     "\x93NUMPY" (6 bytes), then the version as two bytes: major 1, 2 or 3, minor 0
//   length    the header's length: u16 little-endian in version 1, u32 in versions 2 and 3
//   header    an ASCII (version 3: UTF-8) Python dict literal, padded with spaces and ending in
//             '\n', with exactly the keys 'descr' (a dtype string such as '<i4'),
//             'fortran_order' (True or False) and 'shape' (a tuple of ints); NumPy pads the whole
//             preamble to a multiple of 64 bytes (16 before NumPy 1.9), which reading does not need
//   data      shape's product of elements, C order unless fortran_order
// Accepted: integer and bool dtypes ('i', 'u', 'b' kinds) of 1, 2, 4 or 8 bytes, little-endian
// ('<', or '|' for one byte; '=' is refused since the writer's byte order is unknown), C order,
// and data of exactly the size the shape says. Everything else is refused by name before any
// element is read: a wrong magic or version, a header that is not such a dict or lacks a key,
// Fortran order, a big-endian, floating-point, complex, string or object ('O': pickled Python
// objects, which NeMo's packed files are; never unpickled here) dtype, a truncated file or
// trailing bytes.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include <mxkit/error.hpp>
#include <mxkit/train/mapped_file.hpp>

MXKIT_BEGIN_NAMESPACE
namespace nn {

inline constexpr std::string_view npy_magic{"\x93NUMPY", 6};

class npy_array {
 public:
  npy_array() = default;
  // role: what the file is, for messages (".npy tokens", ".npy loss mask").
  npy_array(const std::filesystem::path& path, const std::string& role) : file_(path, role), name_(role + " '" + path.string() + "'") { parse(); }

  const std::string& descr() const noexcept { return descr_; }
  char kind() const noexcept { return kind_; }                 // 'i', 'u' or 'b'
  std::size_t item_size() const noexcept { return item_; }
  const std::vector<std::uint64_t>& shape() const noexcept { return shape_; }
  std::uint64_t elements() const noexcept { return elements_; }
  const std::string& name() const noexcept { return name_; }
  const std::filesystem::path& path() const noexcept { return file_.path(); }

  // Element i (C order) as a 64-bit integer; uint64 values past INT64_MAX are reported as -1 (the
  // readers refuse every negative token anyway).
  std::int64_t integer(std::uint64_t i) const noexcept {
    const std::byte* p = file_.bytes().data() + data_offset_ + i * item_;
    if (kind_ == 'i') switch (item_) {
        case 1: return load<std::int8_t>(p);
        case 2: return load<std::int16_t>(p);
        case 4: return load<std::int32_t>(p);
        default: return load<std::int64_t>(p);
      }
    switch (item_) {
      case 1: return load<std::uint8_t>(p);
      case 2: return load<std::uint16_t>(p);
      case 4: return load<std::uint32_t>(p);
      default: {
        std::uint64_t v;
        std::memcpy(&v, p, sizeof v);
        return v > static_cast<std::uint64_t>(INT64_MAX) ? -1 : static_cast<std::int64_t>(v);
      }
    }
  }

 private:
  mapped_file file_;
  std::string name_, descr_;
  char kind_ = 'i';
  std::size_t item_ = 0, data_offset_ = 0;
  std::vector<std::uint64_t> shape_;
  std::uint64_t elements_ = 0;

  template <class T>
  static std::int64_t load(const std::byte* p) noexcept {
    T v;
    std::memcpy(&v, p, sizeof v);  // (little-endian hosts: the only ones mxkit's file formats target)
    return static_cast<std::int64_t>(v);
  }

  void parse() {
    const std::byte* b = file_.bytes().data();
    const std::size_t size = file_.size();
    detail::require(size >= 6 && std::memcmp(b, npy_magic.data(), 6) == 0, name_, ": bad magic: not a NumPy .npy file (it must start with \"\\x93NUMPY\")");
    detail::require(size >= 10, name_, ": truncated: ", size, " bytes, shorter than the .npy preamble");
    const auto major = static_cast<unsigned>(b[6]), minor = static_cast<unsigned>(b[7]);
    detail::require(major >= 1 && major <= 3 && minor == 0, name_, ": bad version ", major, ".", minor, " (.npy versions are 1.0, 2.0 and 3.0)");
    std::size_t length = 0, start = 0;
    if (major == 1) {
      length = static_cast<std::size_t>(b[8]) | static_cast<std::size_t>(b[9]) << 8;
      start = 10;
    } else {
      detail::require(size >= 12, name_, ": truncated: ", size, " bytes, shorter than the version ", major, " preamble");
      for (int i = 3; i >= 0; --i) length = length << 8 | static_cast<std::size_t>(b[8 + i]);
      start = 12;
    }
    detail::require(length <= size - start, name_, ": truncated: the header is ", length, " bytes, the file has ", size - start, " after the preamble");
    data_offset_ = start + length;
    parse_header(std::string_view(reinterpret_cast<const char*>(b + start), length));
    elements_ = 1;
    for (std::uint64_t d : shape_) {
      detail::require(d == 0 || elements_ <= UINT64_MAX / d, name_, ": shape ", shape_text(), " has more elements than a 64-bit count");
      elements_ *= d;
    }
    const std::uint64_t have = size - data_offset_;
    detail::require(elements_ <= have / item_ && elements_ * item_ == have, name_, ": ",
                    elements_ <= have / item_ ? "trailing bytes" : "truncated", ": shape ", shape_text(), " of ", descr_, " is ",
                    elements_ <= UINT64_MAX / item_ ? std::to_string(elements_ * item_) : std::string("more than 2^64"), " bytes of data, the file has ",
                    have);
  }

  std::string shape_text() const {
    std::string s = "(";
    for (std::size_t i = 0; i < shape_.size(); ++i) s += (i ? ", " : "") + std::to_string(shape_[i]);
    return s + (shape_.size() == 1 ? ",)" : ")");
  }

  // The header dict: {'descr': '<i4', 'fortran_order': False, 'shape': (3, 4), }
  void parse_header(std::string_view h) {
    std::size_t i = 0;
    const std::string bad = name_ + ": bad header";
    auto space = [&] {
      while (i < h.size() && (h[i] == ' ' || h[i] == '\n' || h[i] == '\t')) ++i;
    };
    auto expect = [&](char c) {
      space();
      detail::require(i < h.size() && h[i] == c, bad, ": expected '", c, "' at byte ", i, " of: ", h);
      ++i;
    };
    auto quoted = [&] {
      space();
      detail::require(i < h.size() && (h[i] == '\'' || h[i] == '"'), bad, ": expected a quoted string at byte ", i, " of: ", h);
      const char q = h[i++];
      const std::size_t end = h.find(q, i);
      detail::require(end != std::string_view::npos, bad, ": an unterminated string in: ", h);
      const std::string s(h.substr(i, end - i));
      i = end + 1;
      return s;
    };
    bool have_descr = false, have_order = false, have_shape = false;
    expect('{');
    for (;;) {
      space();
      if (i < h.size() && h[i] == '}') break;
      const std::string key = quoted();
      expect(':');
      space();
      if (key == "descr") {
        descr_ = quoted();
        have_descr = true;
      } else if (key == "fortran_order") {
        const bool t = h.substr(i, 4) == "True", f = h.substr(i, 5) == "False";
        detail::require(t || f, bad, ": fortran_order must be True or False in: ", h);
        detail::require(!t, name_, ": fortran_order is True (column-major); only C-order arrays are read: save it with numpy.ascontiguousarray");
        i += 5;
        have_order = true;
      } else if (key == "shape") {
        expect('(');
        for (;;) {
          space();
          if (i < h.size() && h[i] == ')') break;
          std::uint64_t d = 0;
          const std::size_t from = i;
          while (i < h.size() && h[i] >= '0' && h[i] <= '9') {
            detail::require(d <= (UINT64_MAX - 9) / 10, bad, ": a dimension too large in: ", h);
            d = d * 10 + static_cast<std::uint64_t>(h[i++] - '0');
          }
          detail::require(i > from, bad, ": the shape must be a tuple of non-negative integers in: ", h);
          shape_.push_back(d);
          space();
          if (i < h.size() && h[i] == ',') ++i;
        }
        ++i;
        have_shape = true;
      } else {
        detail::fail(bad, ": unknown key '", key, "' (a .npy header holds descr, fortran_order and shape only)");
      }
      space();
      if (i < h.size() && h[i] == ',') ++i;
    }
    detail::require(have_descr && have_order && have_shape, bad, ": it lacks ", !have_descr ? "'descr'" : !have_order ? "'fortran_order'" : "'shape'",
                    ": ", h);
    // The dtype: byte order, kind, size.
    const std::string why = name_ + ": dtype '" + descr_ + "'";
    detail::require(descr_.size() >= 3, why, " is not a simple dtype (structured and object arrays are not read)");
    const char order = descr_[0];
    kind_ = descr_[1];
    const std::string digits = descr_.substr(2);
    detail::require(digits == "1" || digits == "2" || digits == "4" || digits == "8", why, " is not an integer of 1, 2, 4 or 8 bytes");
    item_ = static_cast<std::size_t>(digits[0] - '0');
    detail::require(kind_ == 'i' || kind_ == 'u' || kind_ == 'b', why, " is ",
                    kind_ == 'f' ? "floating-point" : kind_ == 'c' ? "complex" : kind_ == 'O' ? "Python objects (pickled)" : "not an integer",
                    ": only integer and bool arrays are read");
    detail::require(kind_ != 'b' || item_ == 1, why, ": a bool is one byte");
    detail::require(order == '<' || (order == '|' && item_ == 1), why, order == '>' ? " is big-endian" : " has no little-endian byte order",
                    ": only little-endian ('<') arrays are read");
  }
};

}  // namespace nn
MXKIT_END_NAMESPACE
