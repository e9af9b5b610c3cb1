// Mixing Tensor<float> and Tensor<double> in + needs an explicit .to<T>().
// expect: kiln: operands of an elementwise op have different dtypes; convert one with .to<T>()
#include <kiln/kiln.hpp>

int main() {
  kiln::Tensor<float> a = kiln::ones<float>({4});
  kiln::Tensor<double> b = kiln::ones<double>({4});
#ifdef KILN_SHOULD_FAIL
  kiln::Tensor<float> c = a + b;
#else
  kiln::Tensor<float> c = a + b.to<float>();
#endif
  return c.numel() == 4 ? 0 : 1;
}
