// SPDX-License-Identifier: Apache-2.0
#pragma once
// Names follow folders: everything under ref/ (the host oracle: quantizer, validation, peer
// presets, reference GEMMs, the host backend) is in namespace mxkit::ref. Until release 0.2 the
// names that were in mxkit itself before 0.1.x (mxkit::quantize_rowwise, mxkit::validate,
// mxkit::peers::..., ...) still resolve, through this one using-directive, which every ref/ header
// includes first (CHANGELOG.md). New code spells mxkit::ref::.
#include <mxkit/config.hpp>
#include <mxkit/enum_names.hpp>

MXKIT_BEGIN_NAMESPACE
namespace ref {
// The enums of ref/ live here, so argument-dependent lookup of name_of(e) (detail::check_enum, a
// caller's unqualified call) must find it here too.
using mxkit::name_of;
}  // namespace ref
using namespace ref;  // compatibility with mxkit::X spellings of ref/ names; removed in 0.2
MXKIT_END_NAMESPACE
