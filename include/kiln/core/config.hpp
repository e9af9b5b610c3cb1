#pragma once
// The one header that defines kiln's version and tunable constants.

#define KILN_VERSION_MAJOR 0
#define KILN_VERSION_MINOR 1
#define KILN_VERSION_PATCH 0
#define KILN_VERSION_STRING "0.1.0"

// Forces inlining: expression building (each node a small constructor) inside kernels, such as the
// derivatives a fused backward builds per vector, must not become calls.
#define KILN_INLINE [[gnu::always_inline]] inline

namespace kiln {

inline constexpr const char* version() { return KILN_VERSION_STRING; }

// Largest rank a tensor can have (PyTorch allows more; 8 keeps shapes in a fixed-size array).
inline constexpr int kMaxRank = 8;

// An elementwise loop is split over threads once numel * (summed op cost) passes this many cost units
// (one unit is roughly one cheap vector op per element, as in Eigen's cost model).
inline constexpr long long kParallelCostThreshold = 1 << 18;

}  // namespace kiln
