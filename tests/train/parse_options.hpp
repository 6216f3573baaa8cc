// SPDX-License-Identifier: Apache-2.0
#pragma once
// The training program's options parsed from a test's list of arguments, as main() would get them.
#include <optional>
#include <string>
#include <vector>

#include <mxkit/train_program/options.hpp>

namespace train_program_test {

inline std::optional<mxkit::train_program::options> parse(std::vector<std::string> args, const char* program = "05_train") {
  args.insert(args.begin(), program);
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  return mxkit::train_program::parse_options(static_cast<int>(argv.size()), argv.data());
}

}  // namespace train_program_test
