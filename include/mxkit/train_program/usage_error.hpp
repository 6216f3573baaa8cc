// SPDX-License-Identifier: Apache-2.0
#pragma once
// The training program's usage error: a bad command line, which the mains report with exit
// status 2 (options.hpp's flags, models.hpp's names).
#include <stdexcept>

#include <mxkit/config.hpp>

MXKIT_BEGIN_NAMESPACE
namespace train_program {

// A bad command line: what() names the flag and the value.
class usage_error : public std::invalid_argument {
 public:
  using std::invalid_argument::invalid_argument;
};

}  // namespace train_program
MXKIT_END_NAMESPACE
