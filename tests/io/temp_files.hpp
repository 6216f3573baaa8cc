// SPDX-License-Identifier: Apache-2.0
// Scratch folders and whole-file reads and writes for the tests of file formats (checkpoints,
// safetensors): one definition, shared by the files that one unity build compiles together.
#pragma once

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <string>
#include <system_error>
#include <vector>

namespace nn_test {

// A new folder under the system's temporary directory, removed with its contents at scope exit.
struct temp_dir {
  std::filesystem::path path =
      std::filesystem::temp_directory_path() / ("mxkit_test_" + std::to_string(std::random_device{}()));
  temp_dir() { std::filesystem::create_directories(path); }
  temp_dir(const temp_dir&) = delete;
  temp_dir& operator=(const temp_dir&) = delete;
  ~temp_dir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
};

inline std::vector<std::uint8_t> read_all(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

inline void write_all(const std::filesystem::path& p, const std::vector<std::uint8_t>& bytes) {
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
}

}  // namespace nn_test
