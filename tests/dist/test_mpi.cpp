// What only the MPI backend does: collectives on non-contiguous views (staged through a contiguous copy and written
// back), the check_shapes debug mode on a second group, and background progress during a sleep. The collectives
// common to every backend: test_collectives.cpp.
#include <doctest/doctest.h>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "expectations.hpp"
#include "kiln/dist/mpi.hpp"

using namespace kiln;
using namespace kiln::dist_test;
using dist::ReduceOp;

TEST_CASE("all_reduce of a non-contiguous view writes through to its base") {
  auto& pg = group();
  Tensor<double> base = filled<double>(pg.rank(), 6 * 5).reshape({6, 5});
  Tensor<double> view = base.transpose(0, 1);  // [5, 6], not contiguous
  REQUIRE(!view.is_contiguous());
  pg.all_reduce(view);
  CHECK(mismatches(base.reshape({30}), [&](int64_t i) { return reduce_locally<double>(ReduceOp::sum, pg.size(), i); },
                   "non-contiguous all_reduce") == 0);
}

TEST_CASE("broadcast into a non-contiguous view") {
  auto& pg = group();
  Tensor<float> base = filled<float>(pg.rank(), 4 * 7).reshape({4, 7});
  pg.broadcast(base.transpose(0, 1), 1 % pg.size());
  CHECK(mismatches(base.reshape({28}), [&](int64_t i) { return value<float>(1 % pg.size(), i); }, "broadcast view") == 0);
}

TEST_CASE("check_shapes: ranks calling with different sizes all get a DistError, and the group stays usable") {
  dist::MpiProcessGroup pg({.timeout = std::chrono::seconds(20), .check_shapes = true});
  Tensor<float> t = ones<float>({pg.rank() == 0 ? 4 : 5});
  try {
    pg.all_reduce(t);
    FAIL("no DistError");
  } catch (const dist::DistError& e) {
    CHECK(e.op() == "all_reduce");
    CHECK(e.rank() == pg.rank());
    CHECK(std::string(e.what()).find("check_shapes: the ranks called it with different arguments") != std::string::npos);
  }
  CHECK(!pg.aborted());
  Tensor<float> u = ones<float>({6});
  pg.all_reduce(u);
  CHECK(u.to_vector() == std::vector<float>(6, float(pg.size())));
}

TEST_CASE("background progress: an all_reduce completes while its caller sleeps outside MPI") {
  auto& pg = group();
  Tensor<float> t = filled<float>(pg.rank(), 1 << 20);  // 4 MB: several rounds of the algorithm
  pg.barrier();
  pg.set_background_progress(true);
  auto work = pg.all_reduce_async(t);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // no MPI call from this thread
  const bool done_on_first_look = work->is_completed();
  pg.set_background_progress(false);
  work->wait();
  CHECK(done_on_first_look);  // without the thread, the first test only starts the next round (checked by hand)
  CHECK(mismatches(t, [&](int64_t i) { return reduce_locally<float>(ReduceOp::sum, pg.size(), i); }, "progress") == 0);
}
