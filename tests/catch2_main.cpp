// SPDX-License-Identifier: Apache-2.0
// Catch2's main, compiled once and linked into every test executable.
#define CATCH_CONFIG_RUNNER  // v2: Catch's implementation is compiled in this file only
#include "catch.hpp"

int main(int argc, char* argv[]) { return Catch::Session().run(argc, argv); }
