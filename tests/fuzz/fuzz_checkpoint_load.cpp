// SPDX-License-Identifier: Apache-2.0
// libFuzzer target: the input is a checkpoint file for a small model (fuzz_model below), loaded with
// and without an optimizer. load_checkpoint must load it or throw checkpoint_error; any other
// exception (std::bad_alloc, std::length_error, std::ios_base::failure, std::invalid_argument...)
// is a finding, as is any crash, leak or sanitizer report. A file that loads must save and load
// again. Each input is tried twice: as it is, and with its checksums made right (a version 2
// header checksum, where the header declares settings that fit, and the last 8 bytes: the FNV-1a
// of the rest), so that mutations get past the checksums to the settings and record parsers.
// Seeds (corpus/fuzz_checkpoint_load): format version 1 files of fuzz_model with seed 1, weights
// only (weights.ckpt) and with a fresh AdamW (with_optimizer.ckpt), and the first 40 bytes of the
// first (header.ckpt); a version 2 file with run settings and a fresh AdamW (settings_v2.ckpt).
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <unistd.h>

#include <mxkit/io/checkpoint.hpp>
#include <mxkit/host/host_backend.hpp>

namespace {

using namespace mxkit::nn;
using mxkit::ref::host_backend;

struct fuzz_model {
  host_backend be;
  model m;
  adamw opt;
  static model_config config() {
    model_config c;
    c.vocab = 4;
    c.n_layers = 1;
    c.layer = {4, 1, 1, 4};  // d_model, heads, kv heads, d_ff: about 160 weights
    return c;
  }
  fuzz_model() : m(be, config(), recipes::bf16(), 1), opt(be, m.parameters(), {}) {}
};

fuzz_model& state() {
  static fuzz_model s;
  return s;
}

std::filesystem::path scratch(const char* what) {
  return std::filesystem::temp_directory_path() / ("mxkit_fuzz_" + std::string(what) + "_" + std::to_string(::getpid()) + ".ckpt");
}

void write_file(const std::filesystem::path& p, const std::uint8_t* data, std::size_t size) {
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
  if (!out) {
    std::fprintf(stderr, "fuzz_checkpoint_load: cannot write %s\n", p.c_str());
    std::abort();
  }
}

void load(const std::filesystem::path& p, adamw* opt) {
  fuzz_model& s = state();
  try {
    load_checkpoint(p, s.m, opt);
  } catch (const checkpoint_error&) {
    return;  // a refusal: fine
  } catch (const std::exception& e) {
    std::fprintf(stderr, "fuzz_checkpoint_load: load_checkpoint threw something other than checkpoint_error: %s\n", e.what());
    std::abort();
  }
  // Accepted: what it loaded must save and load again.
  const std::filesystem::path again = scratch("resave");
  try {
    save_checkpoint(again, s.m, opt);
    load_checkpoint(again, s.m, opt);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "fuzz_checkpoint_load: an accepted checkpoint does not save and load again: %s\n", e.what());
    std::abort();
  }
  std::filesystem::remove(again);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::filesystem::path file = scratch("input");
  std::vector<std::uint8_t> bytes(data, data + size);
  for (int pass = 0; pass < 2; ++pass) {
    if (pass == 1) {
      if (bytes.size() < checkpoint_header_bytes + 8) break;
      auto put = [&](std::size_t at, std::uint64_t h) {
        for (int i = 0; i < 8; ++i) bytes[at + static_cast<std::size_t>(i)] = static_cast<std::uint8_t>(h >> (8 * i));
      };
      if (bytes[8] == 2) {  // version 2: the header checksum after the settings
        std::uint64_t settings = 0;
        for (int i = 0; i < 8; ++i) settings |= std::uint64_t{bytes[40 + static_cast<std::size_t>(i)]} << (8 * i);
        if (settings <= checkpoint_max_settings_bytes && 48 + settings + 8 <= bytes.size())
          put(48 + settings, checkpoint_io::fnv1a64(bytes.data(), 48 + settings));
      }
      put(bytes.size() - 8, checkpoint_io::fnv1a64(bytes.data(), bytes.size() - 8));
    }
    write_file(file, bytes.data(), bytes.size());
    load(file, &state().opt);
    load(file, nullptr);
  }
  std::filesystem::remove(file);
  return 0;
}
