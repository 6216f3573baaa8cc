#pragma once
// Token embedding: row i of the output is row tokens[i] of the table (V, C).
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include <mxkit/error.hpp>
#include <mxkit/nn/backend.hpp>
#include <mxkit/nn/parameter.hpp>

MXKIT_BEGIN_NAMESPACE
namespace nn {
class embedding {
 public:
  embedding() = default;
  embedding(backend& be, std::string name, std::size_t vocab, std::size_t dim, dtype type) : be_(&be) {
    table_ = make_parameter(be, std::move(name), vocab, dim, type);
  }
  void forward(const std::vector<std::int32_t>& tokens, tensor& out) {
    require_shape(out, tokens.size(), table_.cols(), "embedding output");
    tokens_ = tokens;
    be_->embedding_forward(tokens, table_.value, out);
  }
  void backward(const tensor& dout) {
    if (table_.trainable) be_->embedding_backward(tokens_, dout, table_.grad);
  }
  parameter& table() noexcept { return table_; }
  const parameter& table() const noexcept { return table_; }

 private:
  backend* be_ = nullptr;
  parameter table_;  // (V, C)
  std::vector<std::int32_t> tokens_;
};

}  // namespace nn
MXKIT_END_NAMESPACE
