// SPDX-License-Identifier: Apache-2.0
// The C++ side of tests/python/test_bindings.py: the same host calls the module makes, from a
// plain C++ program, so the test can hold the bindings' bytes and reports to the library's own.
//   cpp_reference quantize <input.f32> <rows> <cols> <format> <axis> <scale layout> <codes out> <scales out>
//   cpp_reference validate <input.f32> <rows> <cols> <format> <axis> <scale layout> <nibbles> <codes> <scales>
// validate prints the report's summary line; quantize writes mxkit's storage with the scales in
// the given layout. NVFP4 (tests/python/test_nvfp4.py), <preset> one of mxkit, te, te_rht, te_2d, torchao:
//   cpp_reference nvfp4 <input.f32> <rows> <cols> <preset> <axis> <scale layout> <codes out> <scales out>
//   cpp_reference nvfp4_validate <input.f32> <rows> <cols> <preset> <axis> <scale layout> <codes> <scales> <tensor scale bits>
// nvfp4 writes the copy as the preset stores it and prints its stored tensor scale's bits (hex);
// nvfp4_validate prints the summary line of the copy checked under the preset.
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <iterator>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include <mxkit/ref/nvfp4_quantize.hpp>
#include <mxkit/ref/quantize.hpp>
#include <mxkit/validation/nvfp4_presets.hpp>
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

// The NVFP4 modes (file comment): mxkit's reference in its own storage, or a peer's preset.
int nvfp4(const std::string& mode, const std::vector<float>& x, std::size_t rows, std::size_t cols, int argc, char** argv) {
  const std::string preset = argv[5];
  const auto axis = parse<mxkit::block_axis>(argv[6]);
  const auto layout = parse<mxkit::scale_layout>(argv[7]);
  const mxkit::matrix_view<const float> in{x.data(), rows, cols};
  std::optional<mxkit::ref::nvfp4_preset> peer;
  if (preset == "te" || preset == "te_rht" || preset == "te_2d") peer = mxkit::ref::peers::te_nvfp4(preset == "te_rht", preset == "te_2d", layout);
  else if (preset == "torchao") peer = mxkit::ref::peers::torchao_nvfp4(layout);
  else if (preset != "mxkit") return 2;
  if (mode == "nvfp4") {
    const mxkit::nvfp4_foreign_buffers b =
        peer ? mxkit::ref::quantize_like(*peer, in, axis)
             : mxkit::store_foreign(mxkit::ref::quantize(in, mxkit::formats::nvfp4, axis), mxkit::own_storage(layout));
    write_file(argv[8], b.data.data(), b.data.size());
    write_file(argv[9], b.scales.data(), b.scales.size());
    std::printf("%08x\n", mxkit::bit_cast<std::uint32_t>(b.tensor_scale));
    return 0;
  }
  if (argc < 11) return 2;
  const std::vector<char> codes = read_file(argv[8]), scales = read_file(argv[9]);
  const float t = mxkit::bit_cast<float>(static_cast<std::uint32_t>(std::stoul(argv[10], nullptr, 16)));
  const std::span<const std::uint8_t> c{reinterpret_cast<const std::uint8_t*>(codes.data()), codes.size()};
  const std::span<const std::uint8_t> s{reinterpret_cast<const std::uint8_t*>(scales.data()), scales.size()};
  const mxkit::nvfp4_foreign_view v = peer ? peer->view(axis, rows, cols, c, s, t)
                                           : mxkit::nvfp4_foreign_view{{mxkit::formats::nvfp4, axis, rows, cols}, {}, mxkit::own_storage(layout), c, s, t, true};
  std::cout << mxkit::ref::validate(in, v, peer ? peer->validation() : mxkit::ref::nvfp4_validate_options{}).summary() << "\n";
  return 0;
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
  if (mode == "nvfp4" || mode == "nvfp4_validate") return nvfp4(mode, x, rows, cols, argc, argv);
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
  mxkit::mx_foreign_view v{{mxkit::format_of(type), axis, rows, cols}, {}, mxkit::own_storage(layout),
                           {reinterpret_cast<const std::uint8_t*>(codes.data()), codes.size()},
                           {reinterpret_cast<const std::uint8_t*>(scales.data()), scales.size()}};
  v.storage.nibbles = parse<mxkit::nibble_order>(argv[8]);
  if (codes.size() < v.data_span() || scales.size() < v.scale_span()) return 4;
  std::cout << mxkit::ref::validate(in, v).summary() << "\n";
  return 0;
}
