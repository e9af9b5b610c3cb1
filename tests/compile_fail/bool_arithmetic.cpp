// Arithmetic on bool tensors is rejected; convert to an integer type first.
// expect: kiln: arithmetic on bool tensors is not supported; convert with .to<int32_t>()
#include <kiln/kiln.hpp>

#include <cstdint>

int main() {
  kiln::Tensor<float> x = kiln::arange(6);
  kiln::Tensor<bool> p = x > 2.0f, q = x < 4.0f;
#ifdef KILN_SHOULD_FAIL
  kiln::Tensor<bool> s = p + q;
  return s.numel() == 6 ? 0 : 1;
#else
  kiln::Tensor<int32_t> s = p.to<int32_t>() + q.to<int32_t>();
  return s.numel() == 6 ? 0 : 1;
#endif
}
