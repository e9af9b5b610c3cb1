#pragma once
// The element types a tensor can hold, and their run-time tags.
#include <bit>
#include <cstdint>
#include <cstring>
#include <limits>
#include <ostream>
#include <type_traits>

namespace kiln {

// bfloat16 storage: the top 16 bits of a float. Arithmetic happens in float; conversion from float
// rounds to nearest even, as PyTorch does (Highway 1.0.3's DemoteTo truncates, so kiln does not use it).
struct bfloat16 {
  uint16_t bits = 0;

  constexpr bfloat16() = default;
  constexpr bfloat16(float value) : bits(round_to_bits(value)) {}  // NOLINT: implicit like a float
  constexpr operator float() const { return std::bit_cast<float>(uint32_t(bits) << 16); }

  static constexpr bfloat16 from_bits(uint16_t b) {
    bfloat16 r;
    r.bits = b;
    return r;
  }
  static constexpr uint16_t round_to_bits(float value) {
    const uint32_t u = std::bit_cast<uint32_t>(value);
    if ((u & 0x7fffffffu) > 0x7f800000u) return uint16_t((u >> 16) | 0x40);  // NaN stays a quiet NaN
    const uint32_t rounding = 0x7fffu + ((u >> 16) & 1u);
    return uint16_t((u + rounding) >> 16);
  }
};

inline std::ostream& operator<<(std::ostream& out, bfloat16 v) { return out << float(v); }

enum class ScalarType : uint8_t { Float, Double, Int32, Int64, Bool, BFloat16 };

template <class T>
inline constexpr bool is_dtype_v = std::is_same_v<T, float> || std::is_same_v<T, double> ||
                                   std::is_same_v<T, int32_t> || std::is_same_v<T, int64_t> ||
                                   std::is_same_v<T, bool> || std::is_same_v<T, bfloat16>;

// A type a Tensor can hold.
template <class T>
concept Dtype = is_dtype_v<T>;

template <class T>
inline constexpr bool is_floating_v =
    std::is_same_v<T, float> || std::is_same_v<T, double> || std::is_same_v<T, bfloat16>;

template <Dtype T>
constexpr ScalarType scalar_type_of() {
  if constexpr (std::is_same_v<T, float>) return ScalarType::Float;
  else if constexpr (std::is_same_v<T, double>) return ScalarType::Double;
  else if constexpr (std::is_same_v<T, int32_t>) return ScalarType::Int32;
  else if constexpr (std::is_same_v<T, int64_t>) return ScalarType::Int64;
  else if constexpr (std::is_same_v<T, bool>) return ScalarType::Bool;
  else return ScalarType::BFloat16;
}

// The type arithmetic on T is carried out in: float for bfloat16, T itself otherwise.
template <class T>
using compute_t = std::conditional_t<std::is_same_v<T, bfloat16>, float, T>;

constexpr const char* dtype_name(ScalarType t) {
  switch (t) {
    case ScalarType::Float: return "float32";
    case ScalarType::Double: return "float64";
    case ScalarType::Int32: return "int32";
    case ScalarType::Int64: return "int64";
    case ScalarType::Bool: return "bool";
    case ScalarType::BFloat16: return "bfloat16";
  }
  return "?";
}

constexpr size_t element_size(ScalarType t) {
  switch (t) {
    case ScalarType::Float: case ScalarType::Int32: return 4;
    case ScalarType::Double: case ScalarType::Int64: return 8;
    case ScalarType::Bool: return 1;
    case ScalarType::BFloat16: return 2;
  }
  return 0;
}

inline std::ostream& operator<<(std::ostream& out, ScalarType t) { return out << dtype_name(t); }

}  // namespace kiln
