// Compile-time budget, autograd: a chain of KILN_CHAIN_DEPTH elementwise ops (four kinds of node, as
// chain40.cpp), materialized with a leaf that requires grad, then backpropagated: the forward
// kernel and the fused backward derived from it (docs/performance.md). Built at depths 10, 70 and
// 130 at -O0 by scripts/compile_growth.py, which checks that the functions instantiated and their code
// grow linearly with the depth, and at depth 70 at -O2 against its limit.
#include <cstdio>

#include "chain.hpp"

#ifndef KILN_CHAIN_DEPTH
#define KILN_CHAIN_DEPTH 40
#endif

int main() {
  kiln::Tensor<float> x = kiln::linspace(-1, 1, 10000);
  x.requires_grad_();
  kiln::Tensor<float> out = kiln_budget::chain<KILN_CHAIN_DEPTH>(x * 1.0f, x);
  kiln::sum(out).backward();
  std::printf("%g %g %s\n", double(out[17].item()), double(x.grad()[17].item()), kiln::simd_target());
  return 0;
}
