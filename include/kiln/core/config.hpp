#pragma once
// The one header that defines kiln's version and tunable constants.

#define KILN_VERSION_MAJOR 0
#define KILN_VERSION_MINOR 1
#define KILN_VERSION_PATCH 0
#define KILN_VERSION_STRING "0.1.0"

// Forces inlining: expression building (each node a small constructor) inside kernels, such as the
// derivatives a fused backward builds per vector, must not become calls.
#define KILN_INLINE [[gnu::always_inline]] inline

// Separate compilation (docs/design.md): a program that defines KILN_SEPARATE_COMPILATION in every translation
// unit and includes <kiln/separate_compilation.hpp> in exactly one of them compiles the runtime's bodies (storage,
// shapes, the loop driver, the autograd engine and nodes) and the training stack's (the layers, losses and
// optimizers, float) once, in that one unit; the others see their declarations and compile calls. Without it kiln
// is header-only and nothing changes.
//   KILN_DECL              marks a non-template function that the compiled part defines: inline when header-only.
//   KILN_HEADER_DEFINITIONS is 1 where those bodies are compiled: every unit when header-only, else the one part.
//   KILN_INSTANTIATE(decl) names a template instantiation the compiled part holds: `extern template decl;` in the
//                          other units, its explicit instantiation in the part, nothing when header-only.
#if defined(KILN_SEPARATE_COMPILATION)
#define KILN_DECL
#if defined(KILN_COMPILING_SEPARATE_PART)
#define KILN_HEADER_DEFINITIONS 1
#define KILN_INSTANTIATE(...) template __VA_ARGS__
#else
#define KILN_HEADER_DEFINITIONS 0
#define KILN_INSTANTIATE(...) extern template __VA_ARGS__
#endif
#else
#define KILN_DECL inline
#define KILN_HEADER_DEFINITIONS 1
#define KILN_INSTANTIATE(...) static_assert(true)
#endif

namespace kiln {

inline constexpr const char* version() { return KILN_VERSION_STRING; }

// Largest rank a tensor can have (PyTorch allows more; 8 keeps shapes in a fixed-size array).
inline constexpr int kMaxRank = 8;

// An elementwise loop is split over threads once numel * (summed op cost) passes this many cost units
// (one unit is roughly one cheap vector op per element, as in Eigen's cost model).
inline constexpr long long kParallelCostThreshold = 1 << 18;

}  // namespace kiln
