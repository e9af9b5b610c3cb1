// Fused elementwise expressions: each assignment below runs as one SIMD pass over the data and
// allocates exactly one tensor, whatever the number of operators in it.
//   bash scripts/run_example.sh      (or: meson setup build && ninja -C build && build/examples/fused_expressions)
#include <kiln/kiln.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace {

void print_head(const char* name, const kiln::Tensor<float>& t) {
  std::printf("%-28s [", name);
  const float* p = t.data_ptr();
  for (int64_t i = 0; i < std::min<int64_t>(t.numel(), 6); ++i) std::printf("%s%.6f", i ? ", " : "", double(p[i]));
  std::printf(", ...]  (%lld elements)\n", static_cast<long long>(t.numel()));
}

template <class Ref>
double max_abs_error(const kiln::Tensor<float>& t, Ref ref) {
  double err = 0;
  for (int64_t i = 0; i < t.numel(); ++i) err = std::max(err, std::abs(double(t.data_ptr()[i]) - ref(i)));
  return err;
}

}  // namespace

int main() {
  const int64_t n = 1 << 20;
  const float a = 1.5f, b = -0.75f;
  kiln::Tensor<float> x = kiln::linspace(-2, 2, n), y = kiln::linspace(0, 1, n), z = kiln::full<float>({n}, 0.25f);
  const float *px = x.data_ptr(), *py = y.data_ptr(), *pz = z.data_ptr();

  std::printf("kiln %s, SIMD target %s (%zu float lanes), %d threads\n\n", kiln::version(), kiln::simd_target(),
              kiln::simd_float_lanes(), kiln::get_num_threads());

  const kiln::MemoryStats before = kiln::memory_stats();
  kiln::Tensor<float> axpbypz = a * x + b * y + z;  // one pass, one allocation
  const kiln::MemoryStats mid = kiln::memory_stats();
  kiln::Tensor<float> gauss = kiln::tanh(x) * kiln::exp(-y * y) + z;
  const kiln::MemoryStats after = kiln::memory_stats();

  print_head("a*x + b*y + z", axpbypz);
  std::printf("  max |error| vs double loop: %.3g, storage allocations: %llu\n",
              max_abs_error(axpbypz, [&](int64_t i) { return double(a) * px[i] + double(b) * py[i] + pz[i]; }),
              static_cast<unsigned long long>(mid.allocations - before.allocations));
  print_head("tanh(x) * exp(-y*y) + z", gauss);
  std::printf("  max |error| vs double loop: %.3g, storage allocations: %llu\n",
              max_abs_error(gauss, [&](int64_t i) { return std::tanh(double(px[i])) * std::exp(-double(py[i]) * py[i]) + pz[i]; }),
              static_cast<unsigned long long>(after.allocations - mid.allocations));

  // Broadcasting: a [4, 1] column against a [3] row gives [4, 3].
  kiln::Tensor<float> col = kiln::arange(4).reshape({4, 1}), row = kiln::arange(3);
  kiln::Tensor<float> grid = col * 10.0f + row;
  std::printf("\n[4, 1] * 10 + [3] ->");
  for (int64_t i = 0; i < grid.numel(); ++i) std::printf(" %g", double(grid.data_ptr()[i]));
  std::printf("\n");

  // Rebinding in a loop reuses the caching allocator's blocks.
  kiln::Tensor<float> h = x;
  for (int i = 0; i < 10; ++i) h = kiln::relu(h * 0.5f + 0.1f);
  std::printf("10 rebinding steps, h[n-1] = %.6f\n", double(h.data_ptr()[n - 1]));

  const kiln::MemoryStats s = kiln::memory_stats();
  std::printf("\nmemory_stats: allocations %llu, cache hits %llu, system allocations %llu, bytes in use %llu, "
              "bytes cached %llu, peak %llu\n",
              static_cast<unsigned long long>(s.allocations), static_cast<unsigned long long>(s.cache_hits),
              static_cast<unsigned long long>(s.system_allocations), static_cast<unsigned long long>(s.bytes_in_use),
              static_cast<unsigned long long>(s.bytes_cached), static_cast<unsigned long long>(s.peak_bytes_in_use));
  return 0;
}
