// SPDX-License-Identifier: Apache-2.0
#pragma once
// Token embedding: row i of the output is row tokens[i] of the table (V, C). Tokens are a
// (tokens, 1) i32 tensor in backend memory (uploaded once per batch, range-checked then).
#include <cstddef>
#include <cstdint>
#include <string>

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
  // tokens (M, 1) i32 -> out (M, C); keeps the tokens for backward.
  void forward(const tensor& tokens, tensor& out) {
    be_->embedding_forward(tokens, table_.value, out);
    tokens_ = tokens;
  }
  void backward(const tensor& dout) {
    if (!table_.trainable) return;
    materialize_grad(*be_, table_);  // the backward adds each token's row in place
    be_->embedding_backward(tokens_, dout, table_.grad);
  }
  void release_saved() noexcept { tokens_.reset(); }
  parameter& table() noexcept { return table_; }
  const parameter& table() const noexcept { return table_; }

 private:
  backend* be_ = nullptr;
  parameter table_;  // (V, C)
  tensor tokens_;    // (M, 1) i32
};

}  // namespace nn
MXKIT_END_NAMESPACE
