#pragma once
// cuBLAS, loaded at run time as the driver is (cuda/driver.hpp): a program that uses it builds without the CUDA
// Toolkit's headers and starts without the library; the first product of CUDA tensors loads it, or throws
// CudaUnavailableError naming it and every place tried. KILN_CUBLAS_LIBRARY names the library to load instead of
// libcublas.so.13 / .12.
//
// One handle per thread and device, created at its first use with the device's primary context current (the context
// kiln's runtime uses, cuda/runtime.hpp) and bound to the thread's current stream before each call, so cuBLAS's work
// is ordered with kiln's kernels and copies. gemm() is the one entry point, per dtype: float and double
// through cublasSgemmStridedBatched / cublasDgemmStridedBatched, bfloat16 and float16 through
// cublasGemmStridedBatchedEx with float compute (they accumulate in float, as the CPU path does).
//
// matmul_allow_tf32(true) is torch.backends.cuda.matmul.allow_tf32: float products may round their operands to TF32
// on tensor cores (CUBLAS_TF32_TENSOR_OP_MATH); off by default, as in torch (CUBLAS_DEFAULT_MATH).
#include <atomic>
#include <cstdlib>
#include <map>
#include <mutex>
#include <string>
#include <type_traits>
#include <vector>

#include "kiln/core/dtype.hpp"
#include "kiln/cuda/current_stream.hpp"
#include "kiln/cuda/driver.hpp"

namespace kiln::cuda {

// The few cuBLAS types and constants kiln uses, with the values of cublas_api.h and library_types.h.
namespace blas {
using Handle = void*;
enum Operation : int { kNoTrans = 0, kTrans = 1 };                            // cublasOperation_t
enum MathMode : int { kDefaultMath = 0, kTf32TensorOpMath = 3 };             // cublasMath_t
enum DataType : int { kFloat32 = 0, kFloat64 = 1, kFloat16 = 2, kBFloat16 = 14 };  // cudaDataType
inline constexpr int kCompute32F = 68;                                        // CUBLAS_COMPUTE_32F
inline constexpr int kGemmDefault = -1;                                       // CUBLAS_GEMM_DEFAULT
}  // namespace blas

namespace detail {
inline std::atomic<bool>& tf32_allowed() {
  static std::atomic<bool> allowed{false};
  return allowed;
}
}  // namespace detail

// torch.backends.cuda.matmul.allow_tf32: whether float32 products of CUDA tensors may use TF32 tensor cores (operands
// rounded to 10 bits of mantissa, several times faster on Ampere and later). Off by default; the next product
// follows a change.
inline void matmul_allow_tf32(bool allow) { detail::tf32_allowed() = allow; }
inline bool matmul_allows_tf32() { return detail::tf32_allowed(); }

class Cublas {
 public:
  // The loaded library; throws CudaUnavailableError where it is missing (a later call tries again).
  static Cublas& get() {
    static Cublas* instance = new Cublas;  // never unloaded: its handles live until the process ends, as the contexts
    return *instance;
  }

  // This thread's handle for device `device`, ready for a call: the device's context current, on the thread's
  // current stream, the math mode following matmul_allows_tf32(). One handle per thread and device, made at the
  // thread's first call: a stream set on a shared handle by one thread would carry another thread's products.
  blas::Handle handle(int device) {
    const Driver& driver = Driver::get();
    {
      std::lock_guard lock(mutex_);
      void*& context = contexts_[device];
      if (!context) {
        // The primary context, as DeviceContext retains it: cuBLAS works in the context current at its calls.
        int dev = 0;
        driver.require(driver.symbol<int (*)(int*, int)>("cuDeviceGet")(&dev, device), "cuDeviceGet");
        driver.require(driver.symbol<int (*)(void**, int)>("cuDevicePrimaryCtxRetain")(&context, dev),
                       "cuDevicePrimaryCtxRetain");
      }
      driver.require(set_current_(context), "cuCtxSetCurrent");
    }
    thread_local std::map<int, PerThread> mine;
    PerThread& d = mine[device];
    if (!d.handle) require(create_(&d.handle), "cublasCreate_v2");
    // On the thread's current stream (cuda/stream.hpp), as kiln's own kernels.
    require(set_stream_(d.handle, reinterpret_cast<void*>(current_stream_of(device))), "cublasSetStream_v2");
    const int math = matmul_allows_tf32() ? blas::kTf32TensorOpMath : blas::kDefaultMath;
    if (d.math != math) {
      require(set_math_mode_(d.handle, math), "cublasSetMathMode");
      d.math = math;
    }
    return d.handle;
  }

  // C = op(A) op(B) for `batch` column-major products (cuBLAS's arguments; alpha 1, beta 0), in T's cuBLAS form.
  template <class T>
  void gemm(blas::Handle h, blas::Operation opa, blas::Operation opb, int m, int n, int k, const T* a, int lda,
            long long stride_a, const T* b, int ldb, long long stride_b, T* c, int ldc, long long stride_c,
            int batch) const {
    const auto call = [&](const char* name) {
      return kiln::detail::cat(name, "(", opa == blas::kTrans ? "T" : "N", ", ", opb == blas::kTrans ? "T" : "N",
                               ", m=", m, ", n=", n, ", k=", k, ", lda=", lda, ", strideA=", stride_a, ", ldb=", ldb,
                               ", strideB=", stride_b, ", ldc=", ldc, ", strideC=", stride_c, ", batch=", batch, ")");
    };
    if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
      constexpr bool f = std::is_same_v<T, float>;
      GemmFn<T> fn = nullptr;
      if constexpr (f) fn = sgemm_;
      else fn = dgemm_;
      const T one = 1, zero = 0;
      const int status =
          fn(h, opa, opb, m, n, k, &one, a, lda, stride_a, b, ldb, stride_b, &zero, c, ldc, stride_c, batch);
      if (status != 0) require(status, call(f ? "cublasSgemmStridedBatched" : "cublasDgemmStridedBatched"));
    } else {
      static_assert(is_half_v<T>, "kiln::cuda: cuBLAS products take float, double, bfloat16 or float16");
      const int type = std::is_same_v<T, bfloat16> ? blas::kBFloat16 : blas::kFloat16;
      const float one = 1, zero = 0;
      const int status = gemm_ex_(h, opa, opb, m, n, k, &one, a, type, lda, stride_a, b, type, ldb, stride_b, &zero, c,
                                  type, ldc, stride_c, batch, blas::kCompute32F, blas::kGemmDefault);
      if (status != 0) require(status, call("cublasGemmStridedBatchedEx"));
    }
  }

  // Throws CudaError naming the call and cuBLAS's status unless status is CUBLAS_STATUS_SUCCESS.
  void require(int status, const std::string& call) const {
    if (status == 0) return;
    const char* name = status_name_(status);
    const char* text = status_string_(status);
    throw CudaError(kiln::detail::cat("kiln::cuda: ", call, " failed: ", name ? name : "cuBLAS status", " (", status,
                                      ")", text ? kiln::detail::cat(": ", text) : ""));
  }

  // Any other cuBLAS function, as F (the benchmark calls cublasSgemm_v2 directly).
  template <class F>
  F symbol(const char* name) const {
    return lib_.symbol<F>(name);
  }
  const std::string& path() const { return lib_.path(); }

 private:
  template <class T>
  using GemmFn = int (*)(blas::Handle, int, int, int, int, int, const T*, const T*, int, long long, const T*, int,
                         long long, const T*, T*, int, long long, int);
  using GemmExFn = int (*)(blas::Handle, int, int, int, int, int, const void*, const void*, int, int, long long,
                           const void*, int, int, long long, const void*, void*, int, int, long long, int, int, int);

  struct PerThread {
    blas::Handle handle = nullptr;
    int math = -1;  // the mode last set on the handle
  };

  static std::vector<std::string> library_names() {
    if (const char* env = std::getenv("KILN_CUBLAS_LIBRARY"); env && *env) return {env};
    return {"libcublas.so.13", "libcublas.so.12", "libcublas.so", "/usr/local/cuda/lib64/libcublas.so"};
  }

  Cublas()
      : lib_("cuBLAS (libcublas)", library_names()),
        create_(lib_.symbol<int (*)(blas::Handle*)>("cublasCreate_v2")),
        set_stream_(lib_.symbol<int (*)(blas::Handle, void*)>("cublasSetStream_v2")),
        set_math_mode_(lib_.symbol<int (*)(blas::Handle, int)>("cublasSetMathMode")),
        status_name_(lib_.symbol<const char* (*)(int)>("cublasGetStatusName")),
        status_string_(lib_.symbol<const char* (*)(int)>("cublasGetStatusString")),
        sgemm_(lib_.symbol<GemmFn<float>>("cublasSgemmStridedBatched")),
        dgemm_(lib_.symbol<GemmFn<double>>("cublasDgemmStridedBatched")),
        gemm_ex_(lib_.symbol<GemmExFn>("cublasGemmStridedBatchedEx")),
        set_current_(Driver::get().symbol<int (*)(void*)>("cuCtxSetCurrent")) {}

  DynamicLibrary lib_;
  int (*create_)(blas::Handle*);
  int (*set_stream_)(blas::Handle, void*);
  int (*set_math_mode_)(blas::Handle, int);
  const char* (*status_name_)(int);
  const char* (*status_string_)(int);
  GemmFn<float> sgemm_;
  GemmFn<double> dgemm_;
  GemmExFn gemm_ex_;
  int (*set_current_)(void*);
  std::mutex mutex_;
  std::map<int, void*> contexts_;  // each device's primary context, retained once
};

}  // namespace kiln::cuda
