// SPDX-License-Identifier: Apache-2.0
#pragma once
// Names of mxkit's enums: one mechanism for every enum the library prints. Next to each enum E
// a specialization of enum_names<E> lists the name of every enumerator, indexed by its value
// (the enumerators are 0, 1, 2, ...), and names the last enumerator:
//
//   template <>
//   struct enum_names<overflow> {
//     static constexpr const char* names[] = {"saturate", "propagate"};
//     static constexpr overflow last = overflow::propagate;
//   };
//
// name_of(e) returns e's name, or "unknown" for a value outside the list. It compiles only when
// the list holds one distinct, non-empty name for every value from 0 to `last`: an enumerator
// appended without a name, or a list that repeats a name, is a compile error.
#include <concepts>
#include <cstddef>
#include <iterator>
#include <string_view>
#include <type_traits>

#include <mxkit/config.hpp>

MXKIT_BEGIN_NAMESPACE

template <class E>
struct enum_names;  // specialized next to each named enum

template <class E>
concept named_enum = std::is_enum_v<E> && requires {
  enum_names<E>::names[0];
  { enum_names<E>::last } -> std::convertible_to<E>;
};

// The number of enumerators of E (the length of its name list).
template <named_enum E>
inline constexpr std::size_t enum_count = std::size(enum_names<E>::names);

namespace detail {
template <named_enum E>
constexpr bool names_cover_enum() noexcept {
  if (enum_count<E> != static_cast<std::size_t>(enum_names<E>::last) + 1) return false;
  for (std::size_t i = 0; i < enum_count<E>; ++i) {
    const std::string_view name = enum_names<E>::names[i];
    if (name.empty() || name == "unknown") return false;
    for (std::size_t j = 0; j < i; ++j)
      if (name == enum_names<E>::names[j]) return false;
  }
  return true;
}
}  // namespace detail

template <named_enum E>
constexpr const char* name_of(E e) noexcept {
  static_assert(detail::names_cover_enum<E>(),
                "enum_names<E>::names must hold one distinct, non-empty name per enumerator, 0 to `last`");
  const auto i = static_cast<std::size_t>(e);  // a negative value wraps past the end
  return i < enum_count<E> ? enum_names<E>::names[i] : "unknown";
}

// The enums of the nn and gpu namespaces find name_of there too (qualified and by ADL).
namespace nn {
using mxkit::name_of;
}  // namespace nn
namespace gpu {
using mxkit::name_of;
}  // namespace gpu

MXKIT_END_NAMESPACE
