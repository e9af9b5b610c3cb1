#pragma once
// Warp-level tensor-core helpers as CUDA C++ text, for generated kernels that multiply 16-bit tiles (a kernel's
// source appends kMma after the prelude, cuda/prelude.hpp). On a GPU (sm_80 and later) they are PTX's
// mma.sync.aligned.m16n8k16 with float accumulators and cvt's packed rounding. On the host, where the tests' shim
// (tests/cuda_null/shim_source.hpp) runs each CUDA thread as a host thread, kiln_shim_mma exchanges the 32 lanes'
// fragments and computes the same tile, so a kernel's meaning, fragment layouts included, is checked without a GPU.
//
// The fragments of one m16n8k16 product D = A B + C (PTX ISA, "Matrix Fragments for mma.m16n8k16 with floating point
// type"), for lane = 4 g + t (g = lane / 4, t = lane % 4); each 32-bit register holds two 16-bit elements, the lower
// index in the lower half:
//   A (16 x 16, row-major)  a[0] = A[g][2t, 2t+1]   a[1] = A[g+8][2t, 2t+1]   a[2] = A[g][2t+8, 2t+9]   a[3] = A[g+8][2t+8, 2t+9]
//   B (16 x 8)              b[0] = B[2t, 2t+1][g]   b[1] = B[2t+8, 2t+9][g]
//   C, D (16 x 8, float)    c[0], c[1] = C[g][2t, 2t+1]   c[2], c[3] = C[g+8][2t, 2t+1]
// So the C tiles of two adjacent 8-column blocks, rounded to 16 bits and packed in pairs, are an A fragment.
#include <string_view>

namespace kiln::cuda {

inline constexpr std::string_view kMma = R"KILN(#ifndef KILN_CUDA_MMA
#define KILN_CUDA_MMA
#ifdef __CUDA_ARCH__
KILN_DEV void kiln_mma_bf16(float* c, const unsigned* a, const unsigned* b) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}
KILN_DEV void kiln_mma_f16(float* c, const unsigned* a, const unsigned* b) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}
// Two floats rounded to nearest even and packed, lo in the lower half (cvt puts its first source in the upper).
KILN_DEV unsigned kiln_pack_bf16(float lo, float hi) {
  unsigned r;
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
  return r;
}
KILN_DEV unsigned kiln_pack_f16(float lo, float hi) {
  unsigned r;
  asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
  return r;
}
#else
KILN_DEV void kiln_mma_bf16(float* c, const unsigned* a, const unsigned* b) { kiln_shim_mma(c, a, b, kiln_bf16_to_float); }
KILN_DEV void kiln_mma_f16(float* c, const unsigned* a, const unsigned* b) { kiln_shim_mma(c, a, b, kiln_half_to_float); }
KILN_DEV unsigned kiln_pack_bf16(float lo, float hi) {
  return (unsigned)kiln_float_to_bf16(lo) | (unsigned)kiln_float_to_bf16(hi) << 16;
}
KILN_DEV unsigned kiln_pack_f16(float lo, float hi) {
  return (unsigned)kiln_float_to_half(lo) | (unsigned)kiln_float_to_half(hi) << 16;
}
#endif
// Fragments from 16-bit tiles in shared memory (ld elements between rows), for the lane at (g, t): an A fragment of
// a row-major [m][k] tile; a B fragment of a tile stored [n][k] (B's columns contiguous, as K for Q K^T), one 32-bit
// read a register; and of a tile stored [k][n] (B's rows contiguous, as V for P V), two 16-bit reads a register.
KILN_DEV void kiln_a_fragment(unsigned* a, const unsigned short* tile, int ld, int g, int t) {
  const unsigned short* p = tile + g * ld + 2 * t;
  a[0] = *(const unsigned*)p;
  a[1] = *(const unsigned*)(p + 8 * ld);
  a[2] = *(const unsigned*)(p + 8);
  a[3] = *(const unsigned*)(p + 8 * ld + 8);
}
KILN_DEV void kiln_b_fragment_nk(unsigned* b, const unsigned short* tile, int ld, int g, int t) {
  const unsigned short* p = tile + g * ld + 2 * t;
  b[0] = *(const unsigned*)p;
  b[1] = *(const unsigned*)(p + 8);
}
KILN_DEV void kiln_b_fragment_kn(unsigned* b, const unsigned short* tile, int ld, int g, int t) {
  const unsigned short* p = tile + 2 * t * ld + g;
  b[0] = (unsigned)p[0] | (unsigned)p[ld] << 16;
  b[1] = (unsigned)p[8 * ld] | (unsigned)p[9 * ld] << 16;
}
#endif
)KILN";

}  // namespace kiln::cuda
