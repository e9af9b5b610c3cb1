// The C side of tests/interop/test_dlpack_numpy.py, loaded with ctypes: exports kiln tensors as DLPack
// structs and imports NumPy's, through kiln/dlpack.hpp.
#include <atomic>

#include "kiln/dlpack.hpp"
#include "kiln/kiln.hpp"

namespace {
std::atomic<int> live_exports{0};  // kiln memory handed out and not yet released by its consumer
}

extern "C" {

// A [2, 3] float tensor holding 0..5 (transposed to [3, 2] when asked), as a DLManagedTensor or, with
// versioned, a DLManagedTensorVersioned.
void* kiln_test_export(int versioned, int transposed) {
  float* data = new float[6];
  for (int i = 0; i < 6; ++i) data[i] = float(i);
  ++live_exports;
  kiln::Tensor<float> t = kiln::from_blob(data, {2, 3}, [](void* p) {
    delete[] static_cast<float*>(p);
    --live_exports;
  });
  if (transposed) t = t.t();
  return versioned ? static_cast<void*>(kiln::to_dlpack_versioned(t)) : static_cast<void*>(kiln::to_dlpack(t));
}

int kiln_test_live_exports() { return live_exports; }

// The deleter of an export nobody consumed (the capsule's destructor calls it).
void kiln_test_delete(void* managed, int versioned) {
  if (versioned) {
    auto* m = static_cast<DLManagedTensorVersioned*>(managed);
    m->deleter(m);
  } else {
    auto* m = static_cast<DLManagedTensor*>(managed);
    m->deleter(m);
  }
}

// Imports a float64 tensor from NumPy, multiplies it by factor in place (in NumPy's memory) and returns
// its sum; the import is released before returning. Returns NaN when from_dlpack throws.
double kiln_test_import_scale(void* managed, int versioned, double factor) {
  try {
    kiln::AnyTensor a = versioned ? kiln::from_dlpack(static_cast<DLManagedTensorVersioned*>(managed))
                                  : kiln::from_dlpack(static_cast<DLManagedTensor*>(managed));
    kiln::Tensor<double> t = a.as<double>();
    t *= factor;
    return double(kiln::sum(t).item());
  } catch (const std::exception&) {
    return __builtin_nan("");
  }
}

// float16 both ways: a kiln float16 tensor [1.5, -2.75, 65504, 2^-24] exported for NumPy, and NumPy's float16
// array imported (the sum of its values in double, exact; NaN when from_dlpack throws or the dtype is not half).
void* kiln_test_export_half(int versioned) {
  const kiln::Tensor<kiln::float16> t = kiln::tensor<float>({1.5f, -2.75f, 65504.0f, 0x1p-24f}).to<kiln::float16>();
  return versioned ? static_cast<void*>(kiln::to_dlpack_versioned(t)) : static_cast<void*>(kiln::to_dlpack(t));
}

double kiln_test_import_half_sum(void* managed, int versioned) {
  try {
    kiln::AnyTensor a = versioned ? kiln::from_dlpack(static_cast<DLManagedTensorVersioned*>(managed))
                                  : kiln::from_dlpack(static_cast<DLManagedTensor*>(managed));
    double total = 0;
    for (kiln::float16 v : a.as<kiln::float16>().to_vector()) total += double(float(v));
    return total;
  } catch (const std::exception&) {
    return __builtin_nan("");
  }
}

}  // extern "C"
