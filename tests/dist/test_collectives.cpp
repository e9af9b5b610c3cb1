// Every collective of the default group's backend against an expectation each rank computes locally from the
// formula every rank used to fill its tensor, for float, double, int32 and int64 and sizes 0, 1, odd and large
// (over 2 and 3 ranks: meson test runs this file with both); bfloat16, float16 and bool reductions; argument errors.
// The tensors live where the group's collectives take them (group().device()): the MPI tests (kiln_dist_tests) run
// these cases on CPU tensors, the NCCL tests (kiln_nccl_emulated_tests) on CUDA tensors of the emulated device.
// What only one backend does: test_mpi.cpp, test_nccl.cpp. Timeouts and lost ranks: main.cpp's scenarios.
#include <doctest/doctest.h>

#include <chrono>
#include <cstring>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "expectations.hpp"

using namespace kiln;
using namespace kiln::dist_test;
using dist::ReduceOp;


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

TEST_CASE_TEMPLATE("all_reduce of 16-bit floats (user-defined MPI ops)", T, bfloat16, float16) {
  auto& pg = group();
  for (const ReduceOp op : all_ops) {
    Tensor<T> t = empty<T>({301});
    for (int64_t i = 0; i < 301; ++i) t.data_ptr()[i] = T(value<float>(pg.rank(), i));
    t = t.to(here());
    pg.all_reduce(t, op);
    CHECK(mismatches(t.cpu().template to<float>(), [&](int64_t i) { return float(T(reduce_locally<float>(op, pg.size(), i))); },
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
  any = any.to(here());
  all = all.to(here());
  pg.all_reduce(any, ReduceOp::sum);
  pg.all_reduce(all, ReduceOp::product);
  CHECK(any.cpu().to_vector() == std::vector<bool>{false, true, true, true});
  CHECK(all.cpu().to_vector() == std::vector<bool>{false, false, true, false});
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
      Tensor<T> out = full<T>({n}, T(99), here());
      pg.reduce_scatter(out, in, op);
      CHECK(mismatches(out, [&](int64_t i) { return reduce_locally<T>(op, pg.size(), pg.rank() * n + i); },
                       detail::cat("reduce_scatter n=", n)) == 0);
    }
}

TEST_CASE_TEMPLATE("all_to_all: part j of rank i goes to part i of rank j", T, float, double, int32_t, int64_t) {
  auto& pg = group();
  for (const int64_t n : sizes) {
    const Tensor<T> in = filled<T>(pg.rank(), n * pg.size());
    Tensor<T> out = empty<T>({pg.size(), n}, here());
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
    Tensor<int64_t> in = full<int64_t>({n}, -1, here());
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
  const Tensor<float> in = zeros<float>({3, 2}, here());
  CHECK_THROWS_WITH_AS(pg.all_gather(zeros<float>({5}, here()), in),
                       doctest::Contains("all_gather: output of shape [5]"), ShapeError);
  CHECK_THROWS_WITH_AS(pg.reduce_scatter(zeros<float>({4}, here()), in), doctest::Contains("reduce_scatter: input of shape [3, 2]"),
                       ShapeError);
  CHECK_THROWS_AS(pg.all_gather(zeros<double>({6 * pg.size()}, here()), in), DTypeError);
  CHECK_THROWS_WITH_AS(pg.broadcast(in, pg.size()), doctest::Contains("broadcast: root"), std::invalid_argument);
  CHECK_THROWS_WITH_AS(pg.send(in, pg.rank()), doctest::Contains("send: peer rank"), std::invalid_argument);
  CHECK_THROWS_WITH_AS(pg.all_reduce(AnyTensor()), doctest::Contains("all_reduce: the tensor is undefined"),
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS(dist::init_process_group(pg.backend()), doctest::Contains("already initialized"), std::logic_error);
  CHECK_THROWS_WITH_AS(dist::init_process_group("gloo"), doctest::Contains("unknown backend \"gloo\""),
                       std::logic_error);
  CHECK(!pg.aborted());
}

