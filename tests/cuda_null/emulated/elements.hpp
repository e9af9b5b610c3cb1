#pragma once
// The element types the emulated libraries read and write (float, double and kiln's 16-bit types, which round to
// nearest even as a GPU's conversions do), each library mapping its own type codes onto them.
#include <cstdint>

#include "kiln/core/dtype.hpp"

namespace kiln_emulated {

enum class Element { Float32, Float64, Float16, BFloat16 };

inline double load(const void* p, int64_t i, Element e) {
  switch (e) {
    case Element::Float32: return static_cast<const float*>(p)[i];
    case Element::Float64: return static_cast<const double*>(p)[i];
    case Element::BFloat16: return float(static_cast<const kiln::bfloat16*>(p)[i]);
    default: return float(static_cast<const kiln::float16*>(p)[i]);
  }
}
inline void store(void* p, int64_t i, Element e, double v) {
  switch (e) {
    case Element::Float32: static_cast<float*>(p)[i] = float(v); break;
    case Element::Float64: static_cast<double*>(p)[i] = v; break;
    case Element::BFloat16: static_cast<kiln::bfloat16*>(p)[i] = kiln::bfloat16(float(v)); break;
    default: static_cast<kiln::float16*>(p)[i] = kiln::float16(float(v)); break;
  }
}

}  // namespace kiln_emulated
