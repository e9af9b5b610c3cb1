#pragma once
// Threads: OpenMP, split by a cost model; kiln::set_num_threads / get_num_threads as in torch.
#include <algorithm>
#include <cstdint>

#ifdef _OPENMP
#include <omp.h>
#endif

#include "kiln/core/config.hpp"

namespace kiln {

inline void set_num_threads(int n) {
#ifdef _OPENMP
  omp_set_num_threads(std::max(n, 1));
#else
  (void)n;
#endif
}

inline int get_num_threads() {
#ifdef _OPENMP
  return omp_get_max_threads();
#else
  return 1;
#endif
}

namespace cpu {

namespace detail {
// The one place f's body is compiled: both the serial call and the parallel region call this.
template <class F>
[[gnu::noinline]] void run_chunk(F& f, int64_t begin, int64_t end) {
  f(begin, end);
}
}  // namespace detail

// Calls f(begin, end) over [0, total), split into one contiguous chunk per thread when
// total * cost_per_element passes the threshold; chunk edges are multiples of `align`.
template <class F>
void parallel_for(int64_t total, int64_t cost_per_element, int64_t align, F&& f) {
  if (total <= 0) return;
  const int64_t work = total * std::max<int64_t>(cost_per_element, 1);
  int threads = get_num_threads();
  if (threads > 1 && work >= kParallelCostThreshold) {
    threads = int(std::min<int64_t>(threads, work / (kParallelCostThreshold / 2)));
  } else {
    threads = 1;
  }
  // Serial work calls f directly: entering even a one-thread OpenMP region costs about 0.6 us here,
  // more than a small tensor's whole kernel.
  if (threads == 1) {
    detail::run_chunk(f, 0, total);
    return;
  }
#ifdef _OPENMP
#pragma omp parallel num_threads(threads)
#endif
  {
#ifdef _OPENMP
    const int64_t t = omp_get_thread_num(), nt = omp_get_num_threads();
#else
    const int64_t t = 0, nt = 1;
#endif
    const int64_t per = (total / nt / align + 1) * align;
    const int64_t begin = std::min(total, t * per), end = std::min(total, begin + per);
    if (begin < end) detail::run_chunk(f, begin, end);
  }
}

}  // namespace cpu
}  // namespace kiln
