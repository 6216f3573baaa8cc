// SPDX-License-Identifier: Apache-2.0
#pragma once
// Where the examples find the repository's corpora (data/stories.txt and data/qa.txt) when the
// command line names none: the caller's candidates first, then $MXKIT_DATA_DIR, ./data and each
// parent's data/, and last the data/ next to this source tree (a build folder anywhere works).
#include <cstdlib>
#include <filesystem>
#include <optional>
#include <vector>

inline std::optional<std::filesystem::path> find_repository_data(std::vector<std::filesystem::path> candidates = {}) {
  namespace fs = std::filesystem;
  if (const char* env = std::getenv("MXKIT_DATA_DIR")) candidates.emplace_back(env);
  for (fs::path p = fs::current_path(); !p.empty(); p = p.parent_path()) {
    candidates.push_back(p / "data");
    if (p == p.parent_path()) break;
  }
  candidates.push_back(fs::path(__FILE__).parent_path().parent_path() / "data");
  for (const fs::path& c : candidates)
    if (fs::exists(c / "stories.txt") && fs::exists(c / "qa.txt")) return c;
  return std::nullopt;
}
