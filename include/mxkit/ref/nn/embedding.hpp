// SPDX-License-Identifier: Apache-2.0
#pragma once
// Token embedding: row i of the output is row tokens[i] of the table (V, C). Token ids are checked
// against the vocabulary once, on the host, when they are uploaded (nn::backend::write_tokens).
// Host reference kernels (the oracle of every device kernel), called by ref::host_backend.
#include <cstddef>
#include <cstdint>

#include <mxkit/config.hpp>

MXKIT_BEGIN_NAMESPACE
namespace ref {


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


}  // namespace ref
MXKIT_END_NAMESPACE
