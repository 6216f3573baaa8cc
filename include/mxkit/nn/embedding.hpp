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
namespace host {

inline void check_tokens(const std::vector<std::int32_t>& tokens, std::size_t vocab) {
  for (std::size_t i = 0; i < tokens.size(); ++i)
    detail::require(tokens[i] >= 0 && static_cast<std::size_t>(tokens[i]) < vocab, "token ", i, " is ", tokens[i],
                    ", outside the vocabulary [0, ", vocab, ")");
}

template <class T>
void embedding_forward(const std::int32_t* tokens, std::size_t n, const T* table, T* out, std::size_t C) {
  for (std::size_t i = 0; i < n; ++i)
    for (std::size_t j = 0; j < C; ++j) out[i * C + j] = table[static_cast<std::size_t>(tokens[i]) * C + j];
}

template <class T>
void embedding_backward(const std::int32_t* tokens, std::size_t n, const T* dout, T* dtable, std::size_t C) {
  for (std::size_t i = 0; i < n; ++i)
    for (std::size_t j = 0; j < C; ++j) dtable[static_cast<std::size_t>(tokens[i]) * C + j] += dout[i * C + j];
}

}  // namespace host

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
