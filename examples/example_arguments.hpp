// SPDX-License-Identifier: Apache-2.0
#pragma once
// The command line of the examples that take no arguments (01, 02, 04): --help or -h prints the
// usage and exits 0; anything else prints it on stderr and exits 2, so that a script that passes
// a flag by mistake fails instead of running something else.
#include <cstdio>
#include <string_view>

namespace example {

// The exit code when the program must stop here, or -1 to go on.
inline int no_arguments(int argc, char** argv, const char* name, const char* usage) {
  for (int i = 1; i < argc; ++i) {
    const std::string_view a = argv[i];
    if (a == "--help" || a == "-h") {
      std::fputs(usage, stdout);
      return 0;
    }
    std::fprintf(stderr, "%s: unknown argument '%s'\n%s", name, argv[i], usage);
    return 2;
  }
  return -1;
}

}  // namespace example
