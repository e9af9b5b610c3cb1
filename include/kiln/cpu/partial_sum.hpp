#pragma once
// A sum in double over n terms with eight independent partial sums, combined in a fixed order: the loop
// is not bound by one add's latency (the compiler may not reassociate a plain running sum), and the
// result is the same on every run and thread count.
#include <cstdint>

namespace kiln::cpu {

template <class Term>
double partial_sum(int64_t n, Term&& term) {
  double part[8] = {};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int k = 0; k < 8; ++k) part[k] += term(i + k);
  for (; i < n; ++i) part[i % 8] += term(i);
  return ((part[0] + part[1]) + (part[2] + part[3])) + ((part[4] + part[5]) + (part[6] + part[7]));
}

}  // namespace kiln::cpu
