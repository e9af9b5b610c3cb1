// doctest's main, compiled once for the whole suite. It first names the SIMD target the suite was built
// for (scripts/test.sh checks it for each build).
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <cstdio>

#include "kiln/cpu/simd_target.hpp"

int main(int argc, char** argv) {
  std::printf("kiln tests: SIMD target %s (%zu float lanes)\n", kiln::simd_target(), kiln::simd_float_lanes());
  std::fflush(stdout);
  doctest::Context context;
  context.applyCommandLine(argc, argv);
  return context.run();
}
