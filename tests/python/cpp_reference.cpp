// SPDX-License-Identifier: Apache-2.0
// The C++ side of tests/python/test_bindings.py: the same host calls the module makes, from a
// plain C++ program, so the test can hold the bindings' bytes and reports to the library's own.
//   cpp_reference quantize <input.f32> <rows> <cols> <format> <axis> <scale layout> <codes out> <scales out>
//   cpp_reference validate <input.f32> <rows> <cols> <format> <axis> <scale layout> <nibbles> <codes> <scales>
// validate prints the report's summary line; quantize writes mxkit's storage with the scales in
// the given layout.
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <iterator>
#include <string>
#include <vector>

#include <mxkit/ref/quantize.hpp>
#include <mxkit/validation/validate.hpp>

namespace {
template <class E>
E parse(const std::string& s) {
  for (std::size_t i = 0; i < mxkit::enum_count<E>; ++i)
    if (s == mxkit::enum_names<E>::names[i]) return static_cast<E>(i);
  std::cerr << "unknown name " << s << "\n";
  std::exit(2);
}
std::vector<char> read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}
void write_file(const std::string& path, const std::uint8_t* p, std::size_t n) {
  std::ofstream f(path, std::ios::binary);
  f.write(reinterpret_cast<const char*>(p), static_cast<std::streamsize>(n));
}
}  // namespace

int main(int argc, char** argv) {
  if (argc < 10) {
    std::cerr << "usage: cpp_reference quantize|validate input rows cols format axis layout ...\n";
    return 2;
  }
  const std::string mode = argv[1];
  const std::vector<char> bytes = read_file(argv[2]);
  const std::size_t rows = std::stoul(argv[3]), cols = std::stoul(argv[4]);
  std::vector<float> x(rows * cols);
  if (bytes.size() != x.size() * sizeof(float)) return 3;
  std::copy(bytes.begin(), bytes.end(), reinterpret_cast<char*>(x.data()));
  const auto type = parse<mxkit::mx_type>(argv[5]);
  const auto axis = parse<mxkit::block_axis>(argv[6]);
  const auto layout = parse<mxkit::scale_layout>(argv[7]);
  const mxkit::matrix_view<const float> in{x.data(), rows, cols};
  if (mode == "quantize") {
    const mxkit::mx_tensor t = mxkit::ref::quantize(in, type, axis);
    const std::vector<std::uint8_t> scales =
        mxkit::to_scale_layout(t.scales().data(), t.layout().lines(), t.layout().blocks_per_line(), layout);
    write_file(argv[8], t.data().data(), t.data().size());
    write_file(argv[9], scales.data(), scales.size());
    return 0;
  }
  if (argc < 11) return 2;
  const std::vector<char> codes = read_file(argv[9]), scales = read_file(argv[10]);
  mxkit::mx_foreign_view v{{type, axis, rows, cols}, {}, mxkit::own_storage(layout),
                           {reinterpret_cast<const std::uint8_t*>(codes.data()), codes.size()},
                           {reinterpret_cast<const std::uint8_t*>(scales.data()), scales.size()}};
  v.storage.nibbles = parse<mxkit::nibble_order>(argv[8]);
  if (codes.size() < v.data_span() || scales.size() < v.scale_span()) return 4;
  std::cout << mxkit::ref::validate(in, v).summary() << "\n";
  return 0;
}
