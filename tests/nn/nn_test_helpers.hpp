// SPDX-License-Identifier: Apache-2.0
#pragma once
// Shared helpers of the nn tests: random tensors, a backend that records the quantization
// requests the layers make, FP8 scales, and small model shapes.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <mxkit/host/host_backend.hpp>
#include <mxkit/train/data.hpp>
#include <mxkit/nn/model.hpp>
#include <mxkit/nn/parameter.hpp>

namespace nn_test {
using namespace mxkit;
using namespace mxkit::nn;
using mxkit::ref::host_backend;

inline tensor random_tensor(backend& be, std::size_t rows, std::size_t cols, std::uint64_t seed, double stddev = 1.0,
                            dtype type = dtype::f32) {
  tensor t = be.alloc(rows, cols, type, mem_tag::activation);
  be.write(t, normal_values(rows * cols, seed, 77, stddev));
  return t;
}

inline std::vector<float> floats(const backend& be, const tensor& t) {
  std::vector<float> out;
  for (double v : be.read(t)) out.push_back(static_cast<float>(v));
  return out;
}

// host_backend that keeps every quantization request (tests read the options the layer used),
// the producers' included: nn::backend's unfused producers quantize through do_quantize*().
class recording_backend : public host_backend {
 public:
  std::vector<quant_request> requests;

  const quant_request& last(operand_use u) const {
    for (std::size_t i = requests.size(); i-- > 0;)
      if (requests[i].use == u) return requests[i];
    detail::fail("no request for ", name_of(u));
  }

 protected:
  qtensor do_quantize(const tensor& x, const quant_request& r) override {
    requests.push_back(r);
    return host_backend::do_quantize(x, r);
  }
  qpair do_quantize_both(const tensor& x, const quant_request& row, const quant_request& col) override {
    requests.push_back(row);
    requests.push_back(col);
    return host_backend::do_quantize_both(x, row, col);
  }
};

// The recipe with bf16 activations (the device's training runs).
inline recipe with_bf16(recipe r) {
  r.activations = dtype::bf16;
  return r;
}

// Sets entry i of a parameter (and bumps its version so quantized copies are remade).
inline void set_entry(backend& be, parameter& p, std::size_t i, double v) {
  std::vector<double> all = be.read(p.value);
  all[i] = v;
  be.write(p.value, all);
  ++p.version;
}

// The current scale of an FP8 tensor's scaling row (a host read).
inline float read_scale(const backend& be, const fp8_scaling_slot& s) {
  detail::require(s.table != nullptr, "read_scale: the tensor has no scaling row");
  return static_cast<float>(be.read(s.table->scale())[s.row]);
}

inline model_config tiny_model(dtype type = dtype::f32) {
  model_config c;
  c.vocab = 256;
  c.n_layers = 1;
  c.layer = {32, 2, 1, 64};
  c.type = type;
  return c;
}

// A short story repeated to 7.5 kB: the training tests' corpus.
inline token_buffer text_tokens() {
  const std::string text =
      "Mira walked to the mill and found two red apples. Tomas gave her three more, so now Mira has five apples. "
      "The day was not cold; it was warm. Ada walked to the river and found a smooth stone. ";
  auto v = std::make_shared<std::vector<std::uint8_t>>();
  for (int i = 0; i < 40; ++i) v->insert(v->end(), text.begin(), text.end());
  return v;
}

}  // namespace nn_test
