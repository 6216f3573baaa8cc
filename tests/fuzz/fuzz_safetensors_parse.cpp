// SPDX-License-Identifier: Apache-2.0
// libFuzzer target: the input is a safetensors file. parse_safetensors must accept it or throw
// safetensors_error; any other exception is a finding, as is any crash, leak or sanitizer report.
// An accepted file must decode every tensor (offsets inside the data) and, re-encoded by mxkit's
// writer (F32, in offset order, the same metadata), parse again to the same names, shapes and
// value bits. The input is also imported into a small model through a file (the model path:
// names, shapes, metadata).
// Seeds (corpus/fuzz_safetensors_parse): weights of fuzz_model's shape from tools/twin/twin.py init
// (model_f32), the Python-written F32 + BF16 fixture of tests/nn/catch2_test_safetensors.cpp
// (tools/twin/safetensors_fixture.py), and a file of metadata only.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <unistd.h>

#include <mxkit/io/hf_llama.hpp>
#include <mxkit/host/host_backend.hpp>

namespace {

using namespace mxkit::nn;

[[noreturn]] void finding(const char* what, const char* detail) {
  std::fprintf(stderr, "fuzz_safetensors_parse: %s: %s\n", what, detail);
  std::abort();
}

struct fuzz_model {
  mxkit::ref::host_backend be;
  model m;
  static model_config config() {
    model_config c;
    c.vocab = 4;
    c.n_layers = 1;
    c.layer = {4, 1, 1, 4};
    return c;
  }
  fuzz_model() : m(be, config(), recipes::bf16(), 1) {}
};

void parse_and_reencode(const std::uint8_t* data, std::size_t size) {
  safetensors_header h;
  try {
    h = parse_safetensors(data, size);
  } catch (const safetensors_error&) {
    return;
  } catch (const std::exception& e) {
    finding("parse_safetensors threw something other than safetensors_error", e.what());
  }
  const std::uint8_t* buffer = data + 8 + h.header_bytes;
  std::vector<safetensors_tensor> tensors;
  for (const safetensors_entry& e : h.tensors) {
    if (e.end > h.data_bytes || 8 + h.header_bytes + h.data_bytes != size) finding("accepted offsets outside the file", e.name.c_str());
    tensors.push_back({e.name, e.shape, safetensors_values(buffer, e)});
  }
  std::vector<std::uint8_t> again;
  try {
    again = encode_safetensors(tensors, safetensors_dtype::f32, h.metadata);
  } catch (const std::exception& e) {
    finding("an accepted file does not re-encode", e.what());
  }
  safetensors_header h2;
  try {
    h2 = parse_safetensors(again.data(), again.size());
  } catch (const std::exception& e) {
    finding("a re-encoded file does not parse", e.what());
  }
  if (h2.tensors.size() != tensors.size() || h2.metadata != h.metadata) finding("re-encoding changed the file", "tensor count or metadata");
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    const std::vector<float> v = safetensors_values(again.data() + 8 + h2.header_bytes, h2.tensors[i]);
    if (h2.tensors[i].name != tensors[i].name || h2.tensors[i].shape != tensors[i].shape || v.size() != tensors[i].values.size() ||
        (!v.empty() && std::memcmp(v.data(), tensors[i].values.data(), v.size() * sizeof(float)) != 0))
      finding("re-encoding changed a tensor", tensors[i].name.c_str());
  }
}

void import_through_file(const std::uint8_t* data, std::size_t size) {
  static fuzz_model s;
  const std::filesystem::path p =
      std::filesystem::temp_directory_path() / ("mxkit_fuzz_safetensors_" + std::to_string(::getpid()) + ".safetensors");
  {
    std::ofstream out(p, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
    if (!out) finding("cannot write", p.c_str());
  }
  try {
    import_safetensors(p, s.m);
  } catch (const safetensors_error&) {
  } catch (const std::exception& e) {
    finding("import_safetensors threw something other than safetensors_error", e.what());
  }
  std::filesystem::remove(p);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  parse_and_reencode(data, size);
  import_through_file(data, size);
  return 0;
}
