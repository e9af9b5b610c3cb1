#pragma once
// Names the SIMD target this translation unit was compiled for (Highway static dispatch: the
// consumer's -march flags choose it).
#include <hwy/highway.h>

namespace kiln {

inline const char* simd_target() { return hwy::TargetName(HWY_STATIC_TARGET); }

// Lanes of a float vector on that target.
inline size_t simd_float_lanes() { return hwy::HWY_NAMESPACE::Lanes(hwy::HWY_NAMESPACE::ScalableTag<float>()); }

}  // namespace kiln
