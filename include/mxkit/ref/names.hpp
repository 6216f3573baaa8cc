// SPDX-License-Identifier: Apache-2.0
#pragma once
// Names follow folders: everything under ref/ (the host oracle: quantizer, validation, peer
// presets, reference GEMMs, the host backend) is in namespace mxkit::ref, spelled mxkit::ref::X.
// The old spellings mxkit::X of these names were removed in 0.2 (CHANGELOG.md). Every ref/ and
// validation/ header includes this one first: it sets the lookup those headers rely on.
#include <mxkit/config.hpp>
#include <mxkit/enum_names.hpp>

MXKIT_BEGIN_NAMESPACE
namespace ref {
// The enums of ref/ live here, so argument-dependent lookup of name_of(e) (detail::check_enum, a
// caller's unqualified call) must find it here too.
using mxkit::name_of;
}  // namespace ref
namespace detail {
// The implementation pieces in mxkit::detail that ref/ and validation/ headers define name the
// ref/ types unqualified. Internal only: mxkit::X does not find ref::X.
using namespace ref;
}  // namespace detail
MXKIT_END_NAMESPACE
