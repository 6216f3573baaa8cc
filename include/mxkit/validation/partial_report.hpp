// SPDX-License-Identifier: Apache-2.0
#pragma once
// What MX's and NVFP4's validation share once the lines are compared: the per-chunk reports added
// in line order (the multi-threaded report is the single-threaded one), and the check of a scale
// layout's padded entries, made after every line. The reports differ only in their mismatch type.
#include <cstddef>
#include <cstdint>

#include <mxkit/config.hpp>

MXKIT_BEGIN_NAMESPACE
namespace detail {

// to += p: the counts, and p's mismatches while fewer than max_reported are listed.
template <class To, class From>
void add_partial_report(To& to, const From& p, std::size_t max_reported) {
  to.scales_checked += p.scales_checked;
  to.elements_checked += p.elements_checked;
  to.padding_checked += p.padding_checked;
  to.scale_mismatches += p.scale_mismatches;
  to.element_mismatches += p.element_mismatches;
  to.padding_mismatches += p.padding_mismatches;
  to.nan_blocks_skipped += p.nan_blocks_skipped;
  to.nan_elements_skipped += p.nan_elements_skipped;
  for (const auto& m : p.mismatches)
    if (to.mismatches.size() < max_reported) to.mismatches.push_back(m);
}

// The entries of `actual`'s stored scale extent beyond the layout's `lines` x `blocks_per_line`
// hold the storage's padding byte: each is counted, and one that does not becomes the mismatch
// mismatch_at(line, block, expected, actual) while fewer than max_reported are listed.
template <class Report, class Copy, class MismatchAt>
void check_scale_padding(Report& r, const Copy& actual, std::size_t lines, std::size_t blocks_per_line, std::size_t max_reported,
                         MismatchAt mismatch_at) {
  const auto e = actual.stored_scale_extent();
  if (!actual.storage.padding_scale || e.size() == 0) return;
  const std::uint8_t want = *actual.storage.padding_scale;
  for (std::size_t line = 0; line < e.lines; ++line)
    for (std::size_t blk = line < lines ? blocks_per_line : 0; blk < e.blocks; ++blk) {
      ++r.padding_checked;
      const std::uint8_t got = actual.scale(line, blk);
      if (got == want) continue;
      ++r.padding_mismatches;
      if (r.mismatches.size() < max_reported) r.mismatches.push_back(mismatch_at(line, blk, want, got));
    }
}

}  // namespace detail
MXKIT_END_NAMESPACE
