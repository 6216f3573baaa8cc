// SPDX-License-Identifier: Apache-2.0
#pragma once
// Element storage in bytes: FP4 two per byte, element 2i in the low nibble (OCP MX v1.0 section
// 5.4.2 leaves packing to the implementation; this order matches CUDA's fp4x2 and aiter).
// Everything else one element per byte.
#include <cstddef>

#include <mxkit/config.hpp>

MXKIT_BEGIN_NAMESPACE

MXKIT_HD constexpr std::uint8_t pack_fp4x2(std::uint8_t even, std::uint8_t odd) noexcept {
  return static_cast<std::uint8_t>((even & 0xF) | ((odd & 0xF) << 4));
}

// Bytes that n elements of `storage_bits` (4 or 8) occupy.
MXKIT_HD constexpr std::size_t packed_bytes(std::size_t n, int storage_bits) noexcept {
  return storage_bits == 4 ? (n + 1) / 2 : n;
}

// Code of element i in a byte buffer of `storage_bits` elements.
MXKIT_HD constexpr std::uint8_t load_code(const std::uint8_t* data, std::size_t i, int storage_bits) noexcept {
  if (storage_bits == 8) return data[i];
  const std::uint8_t byte = data[i / 2];
  return (i & 1) ? static_cast<std::uint8_t>(byte >> 4) : static_cast<std::uint8_t>(byte & 0xF);
}
MXKIT_HD constexpr void store_code(std::uint8_t* data, std::size_t i, std::uint8_t code, int storage_bits) noexcept {
  if (storage_bits == 8) {
    data[i] = code;
    return;
  }
  std::uint8_t& byte = data[i / 2];
  byte = (i & 1) ? static_cast<std::uint8_t>((byte & 0x0F) | (code << 4)) : static_cast<std::uint8_t>((byte & 0xF0) | (code & 0xF));
}

MXKIT_END_NAMESPACE
