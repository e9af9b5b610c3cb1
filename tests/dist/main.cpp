// doctest's main for the MPI tests (kiln_dist_tests), run by meson test under
// `mpirun --allow-run-as-root --oversubscribe -np 2` and `-np 3`. Every rank runs every test case in the same
// order (the collectives must match); rank 0 prints doctest's usual report, the others only their failures.
// The exit status is non-zero on every rank when any rank failed. KILN_DIST_TEST_TIMEOUT_MS sets the default
// group's timeout (default 60 s), so that a broken collective fails the run instead of hanging it.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>

#include "kiln/dist/mpi.hpp"

int main(int argc, char** argv) {
  namespace dist = kiln::dist;
  const char* ms = std::getenv("KILN_DIST_TEST_TIMEOUT_MS");
  dist::ProcessGroup& pg = dist::init_process_group("mpi", std::chrono::milliseconds(ms ? std::atoll(ms) : 60000));
  doctest::Context context;
  context.applyCommandLine(argc, argv);
  if (pg.rank() != 0) context.setOption("minimal", true);
  const int failed = context.run();
  if (context.shouldExit()) return failed;
  try {
    kiln::Tensor<int32_t> any_failed = kiln::full<int32_t>({1}, failed != 0 ? 1 : 0);
    pg.all_reduce(any_failed, dist::ReduceOp::max);
    if (pg.rank() == 0)
      std::printf("kiln dist tests: %d ranks, %s\n", pg.size(), any_failed.item() ? "some rank failed" : "all passed");
    std::fflush(stdout);
    const int status = any_failed.item() ? 1 : 0;
    dist::destroy_process_group();
    return status;
  } catch (const dist::DistError& e) {
    std::printf("kiln dist tests: rank %d: %s\n", pg.rank(), e.what());
    std::fflush(stdout);
    std::_Exit(1);  // without MPI_Finalize: the group is aborted
  }
}
