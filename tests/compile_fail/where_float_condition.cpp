// The condition of where must be bool: compare first (x > 0) instead of passing a float tensor.
// expect: kiln: the condition of where must be a bool tensor or expression
#include <kiln/kiln.hpp>

int main() {
  kiln::Tensor<float> x = kiln::arange(6) - 3.0f, y = kiln::zeros<float>({6});
#ifdef KILN_SHOULD_FAIL
  kiln::Tensor<float> r = kiln::where(x, x, y);
#else
  kiln::Tensor<float> r = kiln::where(x > 0.0f, x, y);
#endif
  return r.numel() == 6 ? 0 : 1;
}
