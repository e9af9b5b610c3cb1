// Logical ops take bool operands: compare float tensors first.
// expect: kiln: logical ops take bool operands; compare first, e.g. x != 0
#include <kiln/kiln.hpp>

int main() {
  kiln::Tensor<float> a = kiln::arange(4), b = kiln::ones<float>({4});
#ifdef KILN_SHOULD_FAIL
  kiln::Tensor<bool> r = kiln::logical_and(a, b);
#else
  kiln::Tensor<bool> r = kiln::logical_and(a != 0.0f, b != 0.0f);
#endif
  return r.numel() == 4 ? 0 : 1;
}
