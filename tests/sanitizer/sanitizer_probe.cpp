// SPDX-License-Identifier: Apache-2.0
// The sanitize build's self-test (tests/sanitizer/CMakeLists.txt): `heap-overflow` reads one int
// past a heap array, which AddressSanitizer reports as heap-buffer-overflow; `signed-overflow`
// adds 1 to INT_MAX, which UndefinedBehaviorSanitizer reports as signed integer overflow. The
// operands are volatile so that the compiler neither folds nor warns about them. Unsanitized,
// both run to the end and print "not caught", and the ctest tests fail.
#include <climits>
#include <cstdio>
#include <cstring>

int main(int argc, char** argv) {
  if (argc == 2 && std::strcmp(argv[1], "heap-overflow") == 0) {
    int* p = new int[4]{1, 2, 3, 4};
    volatile int i = 4;
    std::printf("read %d\n", p[i]);  // one past the end
    delete[] p;
  } else if (argc == 2 && std::strcmp(argv[1], "signed-overflow") == 0) {
    volatile int big = INT_MAX;
    const int sum = big + 1;
    std::printf("sum %d\n", sum);
  } else {
    std::fprintf(stderr, "usage: sanitizer_probe heap-overflow | signed-overflow\n");
    return 2;
  }
  std::printf("not caught\n");
  return 0;
}
