// Every collective of the MPI backend against an expectation each rank computes locally from the formula
// every rank used to fill its tensor, for float, double, int32 and int64 and sizes 0, 1, odd and large
// (over 2 and 3 ranks: meson test runs this file with both); bfloat16, float16 and bool reductions; non-contiguous
// tensors; argument errors; the check_shapes debug mode. Timeouts and lost ranks: failure_main.cpp.
#include <doctest/doctest.h>

#include <chrono>
#include <cstring>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "kiln/dist/mpi.hpp"
#include "kiln/kiln.hpp"

using namespace kiln;
using dist::ReduceOp;

namespace {

dist::ProcessGroup& group() { return dist::default_process_group(); }

// The value rank r puts at index i: small integers of both signs, so sums and products are exact in every dtype.
template <class T>
T value(int r, int64_t i) {
  return T(((i * 7 + r * 13) % 11) - 5 + (std::is_signed_v<T> ? 0 : 5));
}

template <class T>
Tensor<T> filled(int r, int64_t n, int64_t salt = 0) {
  Tensor<T> t = empty<T>({n});
  for (int64_t i = 0; i < n; ++i) t.data_ptr()[i] = value<T>(r, i + salt);
  return t;
}

template <class T>
T reduce_locally(ReduceOp op, int ranks, int64_t i, int64_t salt = 0) {
  T acc = value<T>(0, i + salt);
  for (int r = 1; r < ranks; ++r) {
    const T v = value<T>(r, i + salt);
    switch (op) {
      case ReduceOp::sum:
      case ReduceOp::avg: acc = T(acc + v); break;
      case ReduceOp::min: acc = std::min(acc, v); break;
      case ReduceOp::max: acc = std::max(acc, v); break;
      case ReduceOp::product: acc = T(acc * v); break;
    }
  }
  if (op == ReduceOp::avg) acc = T(acc / T(ranks));
  return acc;
}

// Number of elements of t differing from expect(i); prints the first one.
template <class T, class F>
int64_t mismatches(const Tensor<T>& t, F&& expect, const std::string& what) {
  const Tensor<T> c = t.contiguous();
  int64_t bad = 0;
  for (int64_t i = 0; i < c.numel(); ++i) {
    const T want = expect(i), got = c.data_ptr()[i];
    const bool ok = std::is_floating_point_v<T> ? std::abs(double(got) - double(want)) <= 1e-6 * (1 + std::abs(double(want)))
                                                : got == want;
    if (!ok && bad++ == 0)
      MESSAGE(what, " on rank ", group().rank(), ": element ", i, " is ", double(got), ", expected ", double(want));
  }
  return bad;
}

const int64_t sizes[] = {0, 1, 7, 1000, 100003};
const ReduceOp all_ops[] = {ReduceOp::sum, ReduceOp::avg, ReduceOp::min, ReduceOp::max, ReduceOp::product};

}  // namespace

TEST_CASE_TEMPLATE("all_reduce: every op against the local reduction", T, float, double, int32_t, int64_t) {
  auto& pg = group();
  for (const int64_t n : sizes)
    for (const ReduceOp op : all_ops) {
      if (op == ReduceOp::avg && !std::is_floating_point_v<T>) {
        CHECK_THROWS_WITH_AS(pg.all_reduce(filled<T>(pg.rank(), n), op), doctest::Contains("all_reduce: ReduceOp::avg"),
                             std::invalid_argument);
        continue;
      }
      Tensor<T> t = filled<T>(pg.rank(), n);
      pg.all_reduce(t, op);
      CHECK(t.numel() == n);
      CHECK(mismatches(t, [&](int64_t i) { return reduce_locally<T>(op, pg.size(), i); },
                       detail::cat("all_reduce ", reduce_op_name(op), " n=", n)) == 0);
    }
}

TEST_CASE_TEMPLATE("all_reduce_async: several in flight, completed by polling or wait", T, float, int64_t) {
  auto& pg = group();
  std::vector<Tensor<T>> ts;
  std::vector<std::shared_ptr<dist::Work>> works;
  for (int k = 0; k < 4; ++k) {
    ts.push_back(filled<T>(pg.rank(), 3001, k));
    works.push_back(pg.all_reduce_async(ts.back(), ReduceOp::max));
  }
  while (!works[0]->is_completed()) {
  }
  for (auto& w : works) w->wait();
  for (auto& w : works) CHECK(w->is_completed());
  for (int k = 0; k < 4; ++k)
    CHECK(mismatches(ts[size_t(k)], [&](int64_t i) { return reduce_locally<T>(ReduceOp::max, pg.size(), i, k); },
                     "async all_reduce") == 0);
}

TEST_CASE("all_reduce of a non-contiguous view writes through to its base") {
  auto& pg = group();
  Tensor<double> base = filled<double>(pg.rank(), 6 * 5).reshape({6, 5});
  Tensor<double> view = base.transpose(0, 1);  // [5, 6], not contiguous
  REQUIRE(!view.is_contiguous());
  pg.all_reduce(view);
  CHECK(mismatches(base.reshape({30}), [&](int64_t i) { return reduce_locally<double>(ReduceOp::sum, pg.size(), i); },
                   "non-contiguous all_reduce") == 0);
}

TEST_CASE_TEMPLATE("all_reduce of 16-bit floats (user-defined MPI ops)", T, bfloat16, float16) {
  auto& pg = group();
  for (const ReduceOp op : all_ops) {
    Tensor<T> t = empty<T>({301});
    for (int64_t i = 0; i < 301; ++i) t.data_ptr()[i] = T(value<float>(pg.rank(), i));
    pg.all_reduce(t, op);
    CHECK(mismatches(t.template to<float>(), [&](int64_t i) { return float(T(reduce_locally<float>(op, pg.size(), i))); },
                     detail::cat(dtype_name(scalar_type_of<T>()), " all_reduce ", reduce_op_name(op))) == 0);
  }
}

TEST_CASE("all_reduce of bool: logical or (sum, max) and and (product, min)") {
  auto& pg = group();
  Tensor<bool> any = empty<bool>({4}), all = empty<bool>({4});
  for (int64_t i = 0; i < 4; ++i) {
    // element 0: no rank true; 1: only rank 0; 2: all ranks; 3: all but rank 0
    const bool v = i == 2 || (i == 1 && pg.rank() == 0) || (i == 3 && pg.rank() != 0);
    any.data_ptr()[i] = all.data_ptr()[i] = v;
  }
  pg.all_reduce(any, ReduceOp::sum);
  pg.all_reduce(all, ReduceOp::product);
  CHECK(any.to_vector() == std::vector<bool>{false, true, true, true});
  CHECK(all.to_vector() == std::vector<bool>{false, false, true, false});
}

TEST_CASE_TEMPLATE("broadcast from every root", T, float, double, int32_t, int64_t) {
  auto& pg = group();
  for (const int64_t n : sizes)
    for (int root = 0; root < pg.size(); ++root) {
      Tensor<T> t = filled<T>(pg.rank(), n);
      auto work = pg.broadcast_async(t, root);
      work->wait();
      CHECK(mismatches(t, [&](int64_t i) { return value<T>(root, i); }, detail::cat("broadcast n=", n)) == 0);
    }
}

TEST_CASE("broadcast into a non-contiguous view") {
  auto& pg = group();
  Tensor<float> base = filled<float>(pg.rank(), 4 * 7).reshape({4, 7});
  pg.broadcast(base.transpose(0, 1), 1 % pg.size());
  CHECK(mismatches(base.reshape({28}), [&](int64_t i) { return value<float>(1 % pg.size(), i); }, "broadcast view") == 0);
}

TEST_CASE_TEMPLATE("reduce to every root; the other ranks keep their tensors", T, float, double, int32_t, int64_t) {
  auto& pg = group();
  for (const int64_t n : sizes)
    for (int root = 0; root < pg.size(); ++root)
      for (const ReduceOp op : {ReduceOp::sum, ReduceOp::min, ReduceOp::product}) {
        Tensor<T> t = filled<T>(pg.rank(), n);
        pg.reduce(t, root, op);
        if (pg.rank() == root)
          CHECK(mismatches(t, [&](int64_t i) { return reduce_locally<T>(op, pg.size(), i); },
                           detail::cat("reduce n=", n)) == 0);
        else
          CHECK(mismatches(t, [&](int64_t i) { return value<T>(pg.rank(), i); }, "reduce non-root") == 0);
      }
}

TEST_CASE_TEMPLATE("all_gather: every rank's input in rank order", T, float, double, int32_t, int64_t) {
  auto& pg = group();
  for (const int64_t n : sizes) {
    const Tensor<T> in = filled<T>(pg.rank(), n);
    Tensor<T> out = pg.all_gather(in).template as<T>();
    CHECK(out.shape() == Shape{pg.size(), n});
    CHECK(mismatches(out.reshape({-1}), [&](int64_t i) { return value<T>(int(i / std::max<int64_t>(n, 1)), i % std::max<int64_t>(n, 1)); },
                     detail::cat("all_gather n=", n)) == 0);
  }
}

TEST_CASE_TEMPLATE("reduce_scatter: rank r gets part r of the reduction", T, float, double, int32_t, int64_t) {
  auto& pg = group();
  for (const int64_t n : sizes)
    for (const ReduceOp op : {ReduceOp::sum, ReduceOp::max}) {
      const Tensor<T> in = filled<T>(pg.rank(), n * pg.size());
      Tensor<T> out = full<T>({n}, T(99));
      pg.reduce_scatter(out, in, op);
      CHECK(mismatches(out, [&](int64_t i) { return reduce_locally<T>(op, pg.size(), pg.rank() * n + i); },
                       detail::cat("reduce_scatter n=", n)) == 0);
    }
}

TEST_CASE_TEMPLATE("all_to_all: part j of rank i goes to part i of rank j", T, float, double, int32_t, int64_t) {
  auto& pg = group();
  for (const int64_t n : sizes) {
    const Tensor<T> in = filled<T>(pg.rank(), n * pg.size());
    Tensor<T> out = empty<T>({pg.size(), n});
    pg.all_to_all(out, in);
    // out part i (from rank i) = rank i's input part rank()
    CHECK(mismatches(out.reshape({-1}), [&](int64_t k) {
      const int64_t from = k / std::max<int64_t>(n, 1), j = k % std::max<int64_t>(n, 1);
      return value<T>(int(from), pg.rank() * n + j);
    }, detail::cat("all_to_all n=", n)) == 0);
  }
}

TEST_CASE("send and recv around a ring, and barrier") {
  auto& pg = group();
  const int next = (pg.rank() + 1) % pg.size(), prev = (pg.rank() + pg.size() - 1) % pg.size();
  for (const int64_t n : sizes) {
    const Tensor<int64_t> out = filled<int64_t>(pg.rank(), n);
    Tensor<int64_t> in = full<int64_t>({n}, -1);
    auto r = pg.recv_async(in, prev, 3);
    auto s = pg.send_async(out, next, 3);
    s->wait();
    r->wait();
    CHECK(mismatches(in, [&](int64_t i) { return value<int64_t>(prev, i); }, detail::cat("recv n=", n)) == 0);
  }
  pg.barrier();
  auto b = pg.barrier_async();
  b->wait();
  CHECK(b->is_completed());
}

TEST_CASE("argument errors name the operation and the shapes, on every rank alike") {
  auto& pg = group();
  const Tensor<float> in = zeros<float>({3, 2});
  CHECK_THROWS_WITH_AS(pg.all_gather(zeros<float>({5}), in),
                       doctest::Contains("all_gather: output of shape [5]"), ShapeError);
  CHECK_THROWS_WITH_AS(pg.reduce_scatter(zeros<float>({4}), in), doctest::Contains("reduce_scatter: input of shape [3, 2]"),
                       ShapeError);
  CHECK_THROWS_AS(pg.all_gather(zeros<double>({6 * pg.size()}), in), DTypeError);
  CHECK_THROWS_WITH_AS(pg.broadcast(in, pg.size()), doctest::Contains("broadcast: root"), std::invalid_argument);
  CHECK_THROWS_WITH_AS(pg.send(in, pg.rank()), doctest::Contains("send: peer rank"), std::invalid_argument);
  CHECK_THROWS_WITH_AS(pg.all_reduce(AnyTensor()), doctest::Contains("all_reduce: the tensor is undefined"),
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS(dist::init_process_group("mpi"), doctest::Contains("already initialized"), std::logic_error);
  CHECK_THROWS_WITH_AS(dist::init_process_group("gloo"), doctest::Contains("unknown backend \"gloo\""),
                       std::logic_error);
  CHECK(!pg.aborted());
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
