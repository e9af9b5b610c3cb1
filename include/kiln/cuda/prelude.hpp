#pragma once
// The CUDA C++ that every generated kernel starts with: kiln's type helpers and the forms of ops whose
// meaning plain CUDA would change (integer division by zero, float-to-integer conversion, 16-bit storage).
// The same text compiles with NVRTC and, through the tests' host shim, with g++ (tests/cuda_null), so it
// uses only what both have: no CUDA headers, no standard library, C++17.
#include <string_view>

namespace kiln::cuda {

inline constexpr std::string_view kPrelude = R"KILN(#ifndef KILN_CUDA_PRELUDE
#define KILN_CUDA_PRELUDE
#define KILN_DEV __device__ __forceinline__
// Between groups of leaf loads (codegen.hpp): keeps ptxas from hoisting every load of a many-leaf kernel.
#ifdef __CUDA_ARCH__
#define KILN_LOAD_FENCE() asm volatile("" ::: "memory")
#else
#define KILN_LOAD_FENCE()
#endif
// A scalar operand in a kernel's descriptor block: double for floating types (a float is exact in it),
// long long for integers and bool.
union kiln_scalar { double f; long long i; };
// Four 4-byte elements, loaded and stored as one 16-byte access (the dense loop's vectorized form, codegen.hpp).
struct __align__(16) kiln_u32x4 { unsigned x, y, z, w; };

template <class A, class B> struct kiln_same { static constexpr bool value = false; };
template <class A> struct kiln_same<A, A> { static constexpr bool value = true; };
template <class T> struct kiln_is_int { static constexpr bool value = kiln_same<T, int>::value || kiln_same<T, long long>::value; };
template <class T> struct kiln_int_range;
template <> struct kiln_int_range<int> { static constexpr int lo = -2147483647 - 1, hi = 2147483647; };
template <> struct kiln_int_range<long long> { static constexpr long long lo = -9223372036854775807LL - 1, hi = 9223372036854775807LL; };

// Conversion as kiln's CPU path does it: to bool is x != 0; floating to integer saturates and sends NaN to 0.
template <class To, class From>
KILN_DEV To kiln_cast(From x) {
  if constexpr (kiln_same<To, bool>::value) {
    return x != From(0);
  } else if constexpr (kiln_is_int<To>::value && !kiln_is_int<From>::value && !kiln_same<From, bool>::value) {
    if (x != x) return To(0);
    if (x <= From(kiln_int_range<To>::lo)) return kiln_int_range<To>::lo;
    if (x >= From(kiln_int_range<To>::hi)) return kiln_int_range<To>::hi;
    return To(x);
  } else {
    return To(x);
  }
}

// Integer division truncates; by zero it gives 0 and the most negative value by -1 wraps (ops/binary.hpp).
template <class T>
KILN_DEV T kiln_div(T a, T b) {
  if constexpr (kiln_is_int<T>::value) {
    if (b == T(0)) return T(0);
    if (b == T(-1)) return T(0ULL - (unsigned long long)a);
    return T(a / b);
  } else {
    return a / b;
  }
}

// Rounding functions leave integers alone (the float forms would lose int64 digits).
template <class T> KILN_DEV T kiln_floor(T x) { if constexpr (kiln_is_int<T>::value) return x; else return floor(x); }
template <class T> KILN_DEV T kiln_ceil(T x) { if constexpr (kiln_is_int<T>::value) return x; else return ceil(x); }
template <class T> KILN_DEV T kiln_rint(T x) { if constexpr (kiln_is_int<T>::value) return x; else return rint(x); }

// scatter_add's accumulation (CUDA has no signed 64-bit atomicAdd; two's complement makes the unsigned one right).
KILN_DEV void kiln_atomic_add(float* p, float v) { atomicAdd(p, v); }
KILN_DEV void kiln_atomic_add(double* p, double v) { atomicAdd(p, v); }
KILN_DEV void kiln_atomic_add(int* p, int v) { atomicAdd(p, v); }
KILN_DEV void kiln_atomic_add(long long* p, long long v) {
  atomicAdd((unsigned long long*)p, (unsigned long long)v);
}

// 16-bit storage: bfloat16 and IEEE half, loaded to float and rounded back to nearest even (core/dtype.hpp).
KILN_DEV float kiln_bf16_to_float(unsigned short b) { return __uint_as_float((unsigned)b << 16); }
KILN_DEV unsigned short kiln_float_to_bf16(float v) {
  const unsigned u = __float_as_uint(v);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (unsigned short)((u >> 16) | 0x40u);
  return (unsigned short)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}
KILN_DEV float kiln_half_to_float(unsigned short h) {
  const unsigned sign = (unsigned)(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
  if (e == 0x1fu) return __uint_as_float(sign | 0x7f800000u | (m ? 0x400000u | (m << 13) : 0u));
  if (e == 0) {
    const float v = (float)m * 5.9604644775390625e-8f;
    return sign ? -v : v;
  }
  return __uint_as_float(sign | ((e + 112u) << 23) | (m << 13));
}
KILN_DEV unsigned short kiln_float_to_half(float v) {
  const unsigned u = __float_as_uint(v), sign = (u >> 16) & 0x8000u, a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return (unsigned short)(sign | 0x7e00u | ((a >> 13) & 0x3ffu));
  if (a >= 0x477ff000u) return (unsigned short)(sign | 0x7c00u);
  if (a >= 0x38800000u) return (unsigned short)(sign | ((a + 0xfffu + ((a >> 13) & 1u) - 0x38000000u) >> 13));
  const unsigned e = a >> 23;
  if (e < 101u) return (unsigned short)sign;
  const unsigned m = (a & 0x7fffffu) | 0x800000u, shift = 126u - e;
  const unsigned q = m >> shift, rest = m & ((1u << shift) - 1u), half = 1u << (shift - 1u);
  return (unsigned short)(sign | (q + (rest > half || (rest == half && (q & 1u)))));
}
#endif
)KILN";

}  // namespace kiln::cuda
