// doctest's main for the MPI tests (kiln_dist_tests), run by meson test under
// `mpirun --allow-run-as-root --oversubscribe -np 2` and `-np 3`, and for the NCCL tests on the emulated device
// (kiln_nccl_emulated_tests, built with KILN_DIST_TEST_NCCL: backend "nccl", started by launch_ranks.sh with
// RANK, WORLD_SIZE and KILN_STORE_PATH, or by mpirun, the NCCL id then going over MPI). Every rank runs every test case in the same
// order (the collectives must match); rank 0 prints doctest's usual report, the others only their failures.
// The exit status is non-zero on every rank when any rank failed. KILN_DIST_TEST_TIMEOUT_MS sets the default
// group's timeout (default 60 s), so that a broken collective fails the run instead of hanging it. The cases
// assume at least 2 ranks (a ring of sends, ranks with different arguments).
//
// `kiln_dist_tests --scenario=NAME`: what the survivors see when a rank is lost, run by tests/dist/run_failure.sh
// under `mpirun --enable-recovery` (without it mpirun kills the survivors at once). One scenario per run:
//
//   kill:    rank 1 starts an all_reduce and is killed (SIGKILL) before it completes; every other rank's
//            all_reduce must throw DistError("all_reduce", its rank) within the 5 s timeout (not before it,
//            not more than 2 s after it), and every later call must throw at once.
//   exit:    rank 1 calls std::_Exit(3) before the all_reduce; with 3 ranks, both others must throw (2 s). (With 3
//            ranks a rank killed inside the all_reduce may already have sent what a peer needed, so that peer's
//            all_reduce can complete: measured. The kill scenario therefore runs on 2 ranks.)
//   hang:    the last rank sleeps through the collective (timeout 1 s); the others throw after 1 s.
//   timeout: rank 0 waits for a message rank 1 never sends (timeout 0.3 s): recv throws naming rank 1 as the
//            peer, while the other ranks, untouched, finish normally.
//   abort:   rank 1 hangs for a minute; after its DistError rank 0 calls abort_job (MPI_Abort), which must end
//            every rank: run_failure.sh checks that mpirun returned within 15 s.
//
// Each surviving rank prints "PASS <scenario> rank <r>: ..." or "FAIL ..."; the script counts the lines, since
// mpirun --enable-recovery returns 0 whatever the ranks did (measured, docs/distributed.md).
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>

#include "kiln/dist/mpi.hpp"
#ifdef KILN_DIST_TEST_NCCL
#include "kiln/dist/nccl.hpp"
constexpr const char* kBackend = "nccl";
#else
constexpr const char* kBackend = "mpi";
#endif

using namespace kiln;
using Clock = std::chrono::steady_clock;

namespace {

int report(bool ok, const std::string& scenario, int rank, const std::string& text) {
  std::printf("%s %s rank %d: %s\n", ok ? "PASS" : "FAIL", scenario.c_str(), rank, text.c_str());
  std::fflush(stdout);
  return ok ? 0 : 1;
}

// Runs `call`, which must throw DistError for `op` within [lo, hi] seconds; then a barrier must throw at once.
template <class F>
int expect_dist_error(dist::ProcessGroup& pg, const std::string& scenario, const std::string& op, double lo, double hi,
                      F&& call) {
  const auto t0 = Clock::now();
  try {
    call();
    return report(false, scenario, pg.rank(), op + " returned instead of throwing");
  } catch (const dist::DistError& e) {
    const double s = std::chrono::duration<double>(Clock::now() - t0).count();
    const std::string what = e.what();
    if (e.op() != op || e.rank() != pg.rank() || what.rfind(op + ": timed out", 0) != 0)
      return report(false, scenario, pg.rank(), "unexpected DistError: " + what);
    if (s < lo || s > hi)
      return report(false, scenario, pg.rank(), detail::cat("threw after ", s, " s, expected [", lo, ", ", hi, "]: ", what));
    const auto t1 = Clock::now();
    try {
      pg.barrier();
      return report(false, scenario, pg.rank(), "a barrier after the failure returned");
    } catch (const dist::DistError& later) {
      const double s1 = std::chrono::duration<double>(Clock::now() - t1).count();
      if (!pg.aborted() || s1 > 0.1 || std::string(later.what()).find("aborted") == std::string::npos)
        return report(false, scenario, pg.rank(), detail::cat("later call: ", later.what(), " after ", s1, " s"));
    }
    return report(true, scenario, pg.rank(), detail::cat("DistError after ", s, " s: ", what));
  } catch (const std::exception& e) {
    return report(false, scenario, pg.rank(), std::string("unexpected exception: ") + e.what());
  }
}

}  // namespace

int run_scenario(const std::string& scenario) {
  if (scenario == "kill" || scenario == "exit") {
    const int timeout_s = scenario == "kill" ? 5 : 2;
    auto& pg = dist::init_process_group(kBackend, std::chrono::seconds(timeout_s));
    Tensor<float> t = ones<float>({1000}, pg.device());
    pg.all_reduce(t);  // all ranks alive: completes
    if (t.cpu().data_ptr()[0] != float(pg.size())) return report(false, scenario, pg.rank(), "first all_reduce is wrong");
    if (pg.rank() == 1) {
      if (scenario == "exit") std::_Exit(3);
      auto work = pg.all_reduce_async(t);  // started, then killed before it completes
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      std::raise(SIGKILL);
    }
    return expect_dist_error(pg, scenario, "all_reduce", timeout_s, timeout_s + 2.0, [&] { pg.all_reduce(t); });
  }
  if (scenario == "hang") {
    auto& pg = dist::init_process_group(kBackend, std::chrono::seconds(1));
    pg.barrier();
    if (pg.rank() == pg.size() - 1) {
      std::this_thread::sleep_for(std::chrono::milliseconds(2500));
      std::_Exit(0);
    }
    Tensor<double> t = ones<double>({10}, pg.device());
    return expect_dist_error(pg, scenario, "all_reduce", 1.0, 2.0, [&] { pg.all_reduce(t); });
  }
  if (scenario == "abort") {
    auto& pg = dist::init_process_group(kBackend, std::chrono::milliseconds(500));
    pg.barrier();
    if (pg.rank() == 1) {  // hangs for a minute: only abort_job on rank 0 can end the job sooner
      std::this_thread::sleep_for(std::chrono::seconds(60));
      std::_Exit(0);
    }
    Tensor<float> t = ones<float>({10}, pg.device());
    const int status = expect_dist_error(pg, scenario, "all_reduce", 0.5, 2.5, [&] { pg.all_reduce(t); });
    if (pg.rank() == 0) pg.abort_job(status == 0 ? 0 : 1);  // ends every rank, the hung one included
    std::this_thread::sleep_for(std::chrono::seconds(60));  // the others wait to be ended
    return 1;
  }
  if (scenario == "timeout") {
    auto& pg = dist::init_process_group(kBackend, std::chrono::milliseconds(300));
    pg.barrier();
    if (const int rank = pg.rank(); rank != 0) {
      dist::destroy_process_group();  // pg is gone now
      return report(true, scenario, rank, "not involved");
    }
    Tensor<int32_t> t = zeros<int32_t>({8}, pg.device());
    const int status = expect_dist_error(pg, scenario, "recv", 0.3, 2.0, [&] { pg.recv(t, 1, 7); });
    try {
      pg.recv(t, 1, 7);
    } catch (const dist::DistError& e) {
      if (std::string(e.what()).find("aborted after an earlier failure (recv: timed out after 300 ms on rank 0 of") ==
          std::string::npos)
        return report(false, scenario, 0, std::string("the abort reason is missing: ") + e.what());
    }
    return status;
  }
  std::fprintf(stderr, "kiln_dist_tests: unknown scenario %s (kill, exit, hang, timeout, abort)\n", scenario.c_str());
  return 2;
}

int main(int argc, char** argv) {
  namespace dist = kiln::dist;
  if (argc > 1 && std::string(argv[1]).rfind("--scenario=", 0) == 0) return run_scenario(std::string(argv[1]).substr(11));
  const char* ms = std::getenv("KILN_DIST_TEST_TIMEOUT_MS");
  dist::ProcessGroup& pg = dist::init_process_group(kBackend, std::chrono::milliseconds(ms ? std::atoll(ms) : 60000));
  doctest::Context context;
  context.applyCommandLine(argc, argv);
  if (pg.rank() != 0) context.setOption("minimal", true);
  const int failed = context.run();
  if (context.shouldExit()) return failed;
  try {
    kiln::Tensor<int32_t> any_failed = kiln::full<int32_t>({1}, failed != 0 ? 1 : 0, pg.device());
    pg.all_reduce(any_failed, dist::ReduceOp::max);
    const int status = any_failed.cpu().item() ? 1 : 0;
    if (pg.rank() == 0)
      std::printf("kiln dist tests (%s): %d ranks, %s\n", kBackend, pg.size(), status ? "some rank failed" : "all passed");
    std::fflush(stdout);
    dist::destroy_process_group();
    return status;
  } catch (const dist::DistError& e) {
    std::printf("kiln dist tests: rank %d: %s\n", pg.rank(), e.what());
    std::fflush(stdout);
    std::_Exit(1);  // without MPI_Finalize: the group is aborted
  }
}
