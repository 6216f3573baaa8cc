// SPDX-License-Identifier: Apache-2.0
#pragma once
// Where the examples find their corpora (stories.txt and qa.txt) when the command line names
// none. Nothing about the machine that built the program is compiled in, so a binary that is
// moved or installed keeps finding its data. In order:
//   1. the caller's candidates (a directory given on the command line);
//   2. $MXKIT_DATA_DIR;
//   3. ./data (the repository root as working directory, as scripts/demo.sh runs);
//   4. <directory of the executable>/MXKIT_EXAMPLE_DATA_FROM_BIN (../share/mxkit/data unless
//      the build says otherwise): the installed layout (bin/ beside share/mxkit/data, from
//      `cmake --install <build> --component mxkit_examples`) and the build tree's copy
//      (examples/CMakeLists.txt copies data/ there, relative to <build>/examples/). A relative
//      path, so nothing about the building machine is compiled in. The executable is
//      /proc/self/exe on Linux; elsewhere this step is left out (set MXKIT_DATA_DIR).
// data_search::looked lists every place tried, for the error message of a failed search.
#include <cstdlib>
#include <filesystem>
#include <optional>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

#include <mxkit/config.hpp>

#ifndef MXKIT_EXAMPLE_DATA_FROM_BIN
#define MXKIT_EXAMPLE_DATA_FROM_BIN "../share/mxkit/data"
#endif

MXKIT_BEGIN_NAMESPACE
namespace train_program {

struct data_search {
  std::optional<std::filesystem::path> found;  // the first candidate holding both files
  std::vector<std::filesystem::path> looked;   // every candidate, in the order tried

  // "a, b, c": where the search looked, for a message naming them.
  std::string looked_list() const {
    std::string s;
    for (const std::filesystem::path& p : looked) s += (s.empty() ? "" : ", ") + p.string();
    return s;
  }
};

// The running program's path, or empty where the platform does not say.
inline std::filesystem::path executable_path() {
  std::error_code ec;
  std::filesystem::path exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  return ec ? std::filesystem::path{} : exe;
}

inline data_search search_repository_data(std::vector<std::filesystem::path> candidates = {}) {
  namespace fs = std::filesystem;
  if (const char* env = std::getenv("MXKIT_DATA_DIR"); env && *env) candidates.emplace_back(env);
  std::error_code ec;
  const fs::path cwd = fs::current_path(ec);
  candidates.push_back(ec ? fs::path("data") : cwd / "data");
  if (const fs::path exe = executable_path(); !exe.empty())
    candidates.push_back((exe.parent_path() / MXKIT_EXAMPLE_DATA_FROM_BIN).lexically_normal());
  data_search s;
  for (const fs::path& c : candidates) {
    s.looked.push_back(c);
    if (fs::exists(c / "stories.txt", ec) && fs::exists(c / "qa.txt", ec)) {
      s.found = c;
      break;
    }
  }
  return s;
}

inline std::optional<std::filesystem::path> find_repository_data(std::vector<std::filesystem::path> candidates = {}) {
  return search_repository_data(std::move(candidates)).found;
}

}  // namespace train_program
MXKIT_END_NAMESPACE
