// A double expression does not silently narrow into a Tensor<float>.
// expect: kiln: the expression's dtype differs from the tensor's; convert it with .to<T>()
#include <kiln/kiln.hpp>

int main() {
  kiln::Tensor<double> d = kiln::ones<double>({3});
#ifdef KILN_SHOULD_FAIL
  kiln::Tensor<float> f = d * 2.0 + 1.0;
#else
  kiln::Tensor<float> f = (d * 2.0 + 1.0).to<float>();
#endif
  return f.numel() == 3 ? 0 : 1;
}
