// The emulated device's cuBLAS (libkiln_emulated_cublas.so, named by KILN_CUBLAS_LIBRARY in the tests that use it):
// the column-major GEMMs kiln calls, computed on the host (the emulated device's memory is host memory, driver.cpp)
// with double accumulation, honoring the transposes, leading dims, batch strides (0: a broadcast operand), alpha and
// beta (beta 0 never reads C, as BLAS). It refuses what the real library refuses, with its status: a null handle,
// negative sizes or batch counts, a leading dim below the rows of the matrix it holds, an unknown operation, type or
// compute type. Only what kiln's cuda/cublas.hpp and bench/gpu_bench.cpp call is here, and three functions for tests
// (found with dlsym): the last call and its arguments as text, its stream, and the number of GEMM calls.
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>

#include "elements.hpp"
#include "skip_kernels.hpp"

namespace {

constexpr int kSuccess = 0, kNotInitialized = 1, kInvalidValue = 7, kNotSupported = 15;
constexpr int kOpN = 0, kOpT = 1, kOpC = 2;
constexpr int kFloat32 = 0, kFloat64 = 1, kFloat16 = 2, kBFloat16 = 14;
constexpr int kCompute32F = 68, kCompute32FPedantic = 69, kCompute64F = 70, kCompute64FPedantic = 71;

struct Handle {
  void* stream = nullptr;
  int math = 0;  // CUBLAS_DEFAULT_MATH
};

std::mutex mutex;
std::string last_call;
long calls = 0;
void* last_stream = nullptr;

// This library's type codes as the elements they name (elements.hpp): float, double, bfloat16, else float16.
kiln_emulated::Element element(int type) {
  using kiln_emulated::Element;
  return type == kFloat32 ? Element::Float32 : type == kFloat64 ? Element::Float64
                          : type == kBFloat16 ? Element::BFloat16 : Element::Float16;
}
double load(const void* p, int64_t i, int type) { return kiln_emulated::load(p, i, element(type)); }
void store(void* p, int64_t i, int type, double v) { kiln_emulated::store(p, i, element(type), v); }

// C[b] = alpha op(A[b]) op(B[b]) + beta C[b] for every batch b, column-major; alpha and beta as doubles.
int gemm(const char* name, Handle* h, int ta, int tb, int m, int n, int k, double alpha, const void* A, int atype,
         int lda, long long sa, const void* B, int btype, int ldb, long long sb, double beta, void* C, int ctype,
         int ldc, long long sc, int batch) {
  if (!h) return kNotInitialized;
  const auto valid_op = [](int op) { return op == kOpN || op == kOpT || op == kOpC; };
  if (!valid_op(ta) || !valid_op(tb) || m < 0 || n < 0 || k < 0 || batch < 0) return kInvalidValue;
  if (lda < std::max(1, ta == kOpN ? m : k) || ldb < std::max(1, tb == kOpN ? k : n) || ldc < std::max(1, m))
    return kInvalidValue;
  {
    std::lock_guard lock(mutex);
    ++calls;
    last_stream = h->stream;
    last_call = std::string(name) + "(" + (ta == kOpN ? "N" : "T") + ", " + (tb == kOpN ? "N" : "T") +
                ", m=" + std::to_string(m) + ", n=" + std::to_string(n) + ", k=" + std::to_string(k) +
                ", lda=" + std::to_string(lda) + ", strideA=" + std::to_string(sa) + ", ldb=" + std::to_string(ldb) +
                ", strideB=" + std::to_string(sb) + ", ldc=" + std::to_string(ldc) + ", strideC=" + std::to_string(sc) +
                ", batch=" + std::to_string(batch) + ", math=" + std::to_string(h->math) + ")";
  }
  if (kiln_emulated::skip_kernels()) return kSuccess;
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t j = 0; j < n; ++j)
      for (int64_t i = 0; i < m; ++i) {
        double acc = 0;
        for (int64_t l = 0; l < k; ++l) {
          const int64_t ai = b * sa + (ta == kOpN ? i + l * lda : l + i * lda);
          const int64_t bi = b * sb + (tb == kOpN ? l + j * ldb : j + l * ldb);
          acc += load(A, ai, atype) * load(B, bi, btype);
        }
        const int64_t ci = b * sc + i + j * ldc;
        store(C, ci, ctype, alpha * acc + (beta == 0 ? 0.0 : beta * load(C, ci, ctype)));
      }
  return kSuccess;
}

}  // namespace

extern "C" {

int cublasCreate_v2(void** handle) {
  if (!handle) return kInvalidValue;
  *handle = new Handle;
  return kSuccess;
}
int cublasDestroy_v2(void* handle) {
  if (!handle) return kNotInitialized;
  delete static_cast<Handle*>(handle);
  return kSuccess;
}
int cublasSetStream_v2(void* handle, void* stream) {
  if (!handle) return kNotInitialized;
  static_cast<Handle*>(handle)->stream = stream;
  return kSuccess;
}
int cublasSetMathMode(void* handle, int mode) {
  if (!handle) return kNotInitialized;
  if ((mode & 0xf) > 3) return kInvalidValue;  // DEFAULT, TENSOR_OP (deprecated), PEDANTIC, TF32_TENSOR_OP
  static_cast<Handle*>(handle)->math = mode;
  return kSuccess;
}
const char* cublasGetStatusName(int status) {
  switch (status) {
    case kSuccess: return "CUBLAS_STATUS_SUCCESS";
    case kNotInitialized: return "CUBLAS_STATUS_NOT_INITIALIZED";
    case kInvalidValue: return "CUBLAS_STATUS_INVALID_VALUE";
    case kNotSupported: return "CUBLAS_STATUS_NOT_SUPPORTED";
    default: return "CUBLAS_STATUS_UNKNOWN";
  }
}
const char* cublasGetStatusString(int status) {
  switch (status) {
    case kSuccess: return "success";
    case kNotInitialized: return "the library was not initialized (emulated)";
    case kInvalidValue: return "an invalid numeric value was used as an argument (emulated)";
    case kNotSupported: return "the functionality requested is not supported (emulated)";
    default: return "unknown error (emulated)";
  }
}

int cublasSgemmStridedBatched(void* h, int ta, int tb, int m, int n, int k, const float* alpha, const float* A, int lda,
                              long long sa, const float* B, int ldb, long long sb, const float* beta, float* C, int ldc,
                              long long sc, int batch) {
  if (!alpha || !beta) return kInvalidValue;
  return gemm("cublasSgemmStridedBatched", static_cast<Handle*>(h), ta, tb, m, n, k, *alpha, A, kFloat32, lda, sa, B,
              kFloat32, ldb, sb, *beta, C, kFloat32, ldc, sc, batch);
}
int cublasDgemmStridedBatched(void* h, int ta, int tb, int m, int n, int k, const double* alpha, const double* A,
                              int lda, long long sa, const double* B, int ldb, long long sb, const double* beta,
                              double* C, int ldc, long long sc, int batch) {
  if (!alpha || !beta) return kInvalidValue;
  return gemm("cublasDgemmStridedBatched", static_cast<Handle*>(h), ta, tb, m, n, k, *alpha, A, kFloat64, lda, sa, B,
              kFloat64, ldb, sb, *beta, C, kFloat64, ldc, sc, batch);
}
int cublasSgemm_v2(void* h, int ta, int tb, int m, int n, int k, const float* alpha, const float* A, int lda,
                   const float* B, int ldb, const float* beta, float* C, int ldc) {
  if (!alpha || !beta) return kInvalidValue;
  return gemm("cublasSgemm_v2", static_cast<Handle*>(h), ta, tb, m, n, k, *alpha, A, kFloat32, lda, 0, B, kFloat32,
              ldb, 0, *beta, C, kFloat32, ldc, 0, 1);
}
// The type combinations of cuBLAS's table that kiln uses: 16-bit, or float, operands and output with float compute
// (alpha and beta float), and double with double compute.
int cublasGemmStridedBatchedEx(void* h, int ta, int tb, int m, int n, int k, const void* alpha, const void* A,
                               int atype, int lda, long long sa, const void* B, int btype, int ldb, long long sb,
                               const void* beta, void* C, int ctype, int ldc, long long sc, int batch, int compute,
                               int /*algo*/) {
  if (!alpha || !beta) return kInvalidValue;
  const bool same = atype == btype && btype == ctype;
  const bool compute32 = compute == kCompute32F || compute == kCompute32FPedantic;
  const bool compute64 = compute == kCompute64F || compute == kCompute64FPedantic;
  if (!same || !((compute32 && (atype == kFloat32 || atype == kFloat16 || atype == kBFloat16)) ||
                 (compute64 && atype == kFloat64)))
    return kNotSupported;
  const double a = compute64 ? *static_cast<const double*>(alpha) : *static_cast<const float*>(alpha);
  const double b = compute64 ? *static_cast<const double*>(beta) : *static_cast<const float*>(beta);
  return gemm("cublasGemmStridedBatchedEx", static_cast<Handle*>(h), ta, tb, m, n, k, a, A, atype, lda, sa, B, btype,
              ldb, sb, b, C, ctype, ldc, sc, batch);
}

// For tests: the last GEMM call as "name(opA, opB, m=..., ..., math=mode)" (math: the handle's mode at the call),
// and how many GEMM calls there were.
const char* kiln_emulated_cublas_last_call() {
  static thread_local std::string copy;
  std::lock_guard lock(mutex);
  copy = last_call;
  return copy.c_str();
}
// The stream the last GEMM was issued on (its handle's, cublasSetStream_v2).
void* kiln_emulated_cublas_last_stream() {
  std::lock_guard lock(mutex);
  return last_stream;
}
long kiln_emulated_cublas_calls() {
  std::lock_guard lock(mutex);
  return calls;
}

}  // extern "C"
