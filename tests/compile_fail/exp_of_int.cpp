// exp is a float-only function: an integer tensor must be converted first.
// expect: kiln: this function needs a floating-point tensor; convert it with .to<float>()
#include <kiln/kiln.hpp>

#include <cstdint>

int main() {
  kiln::Tensor<int32_t> n = kiln::arange<int32_t>(5);
#ifdef KILN_SHOULD_FAIL
  kiln::Tensor<int32_t> e = kiln::exp(n);
  return e.numel() == 5 ? 0 : 1;
#else
  kiln::Tensor<float> e = kiln::exp(n.to<float>());
  return e.numel() == 5 ? 0 : 1;
#endif
}
