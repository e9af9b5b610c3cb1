#pragma once
// What the distributed tests expect, computed locally: the value each rank puts in its tensors, the reduction of
// all ranks' values, and a comparison that names the first wrong element. Tensors are made and read where the
// default group's collectives take them (group().device(): the CPU for MPI, the rank's CUDA device for NCCL).
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <type_traits>

#include "kiln/dist/init.hpp"
#include "kiln/kiln.hpp"

namespace kiln::dist_test {

using dist::ReduceOp;

inline dist::ProcessGroup& group() { return dist::default_process_group(); }
inline Device here() { return group().device(); }

// The value rank r puts at index i: small integers of both signs, so sums and products are exact in every dtype.
template <class T>
T value(int r, int64_t i) {
  return T(((i * 7 + r * 13) % 11) - 5 + (std::is_signed_v<T> ? 0 : 5));
}

// Rank r's values, on the group's device.
template <class T>
Tensor<T> filled(int r, int64_t n, int64_t salt = 0) {
  Tensor<T> t = empty<T>({n});
  for (int64_t i = 0; i < n; ++i) t.data_ptr()[i] = value<T>(r, i + salt);
  return t.to(here());
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

// Number of elements of t (on any device) differing from expect(i); prints the first one.
template <class T, class F>
int64_t mismatches(const Tensor<T>& t, F&& expect, const std::string& what) {
  const Tensor<T> c = t.cpu().contiguous();
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

inline const int64_t sizes[] = {0, 1, 7, 1000, 100003};
inline const ReduceOp all_ops[] = {ReduceOp::sum, ReduceOp::avg, ReduceOp::min, ReduceOp::max, ReduceOp::product};

}  // namespace kiln::dist_test
