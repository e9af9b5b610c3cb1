#pragma once
// Warp-level tensor-core helpers as CUDA C++ text, for generated kernels that multiply 16-bit tiles (a kernel's
// source appends kMma after the prelude, cuda/prelude.hpp). On a GPU (sm_80 and later) they are PTX's
// mma.sync.aligned.m16n8k16 with float accumulators, ldmatrix and cvt's packed rounding. On the host, where the
// tests' shim (tests/cuda_null/shim_source.hpp) runs each CUDA thread as a host thread, kiln_shim_mma and
// kiln_shim_ldmatrix exchange the 32 lanes' fragments and addresses and compute the same registers, so a kernel's
// meaning, fragment layouts included, is checked without a GPU.
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
// ldmatrix: four 8 x 8 matrices of 16-bit elements from shared memory, lanes 8 j .. 8 j + 7 giving the addresses
// (16-byte aligned) of matrix j's rows; lane 4 g + t receives in r[j] row g's elements 2t, 2t + 1 (with .trans,
// column g's elements 2t, 2t + 1). volatile: the tiles change between barriers at the same addresses.
KILN_DEV unsigned kiln_shared_address(const void* p) {
  unsigned a;
  asm("{ .reg .u64 s; cvta.to.shared.u64 s, %1; cvt.u32.u64 %0, s; }" : "=r"(a) : "l"(p));
  return a;
}
KILN_DEV void kiln_ldmatrix(unsigned* r, const unsigned short* row) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(kiln_shared_address(row)));
}
KILN_DEV void kiln_ldmatrix_trans(unsigned* r, const unsigned short* row) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(kiln_shared_address(row)));
}
#else
KILN_DEV void kiln_ldmatrix(unsigned* r, const unsigned short* row) { kiln_shim_ldmatrix(r, row, false); }
KILN_DEV void kiln_ldmatrix_trans(unsigned* r, const unsigned short* row) { kiln_shim_ldmatrix(r, row, true); }
KILN_DEV void kiln_mma_bf16(float* c, const unsigned* a, const unsigned* b) { kiln_shim_mma(c, a, b, kiln_bf16_to_float); }
KILN_DEV void kiln_mma_f16(float* c, const unsigned* a, const unsigned* b) { kiln_shim_mma(c, a, b, kiln_half_to_float); }
KILN_DEV unsigned kiln_pack_bf16(float lo, float hi) {
  return (unsigned)kiln_float_to_bf16(lo) | (unsigned)kiln_float_to_bf16(hi) << 16;
}
KILN_DEV unsigned kiln_pack_f16(float lo, float hi) {
  return (unsigned)kiln_float_to_half(lo) | (unsigned)kiln_float_to_half(hi) << 16;
}
#endif
// Fragments from 16-bit tiles in shared memory (ld elements between rows, a multiple of 8; the tile 16-byte aligned),
// by one ldmatrix each: the A fragment of a 16 x 16 row-major tile; and the B fragments of two adjacent 8-column
// blocks of a 16 x 16 B (b[0], b[1] for columns 0-7, b[2], b[3] for 8-15), from a tile stored [n][k] (B's columns
// contiguous, as K for Q K^T) or [k][n] (B's rows contiguous, as V for P V).
KILN_DEV void kiln_a_fragment(unsigned* a, const unsigned short* tile, int ld, int lane) {
  kiln_ldmatrix(a, tile + (lane % 16) * ld + lane / 16 * 8);
}
KILN_DEV void kiln_b_fragments_nk(unsigned* b, const unsigned short* tile, int ld, int lane) {
  kiln_ldmatrix(b, tile + (lane % 8 + lane / 16 * 8) * ld + lane / 8 % 2 * 8);
}
KILN_DEV void kiln_b_fragments_kn(unsigned* b, const unsigned short* tile, int ld, int lane) {
  kiln_ldmatrix_trans(b, tile + (lane % 8 + lane / 8 % 2 * 8) * ld + lane / 16 * 8);
}
#endif
)KILN";

}  // namespace kiln::cuda
