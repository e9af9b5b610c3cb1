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

// IEEE 754 binary16 storage (torch.float16 / torch.half): 1 sign, 5 exponent, 10 mantissa bits, with
// subnormals, infinities and NaN. Arithmetic happens in float; conversion from float rounds to nearest even
// (subnormals and overflow to inf included), as PyTorch's c10::Half. Conversion to float is exact. A NaN keeps
// its sign and the top bits of its payload and comes out quiet, both ways, which is what x86's F16C
// instructions do (cpu/stage.hpp uses them on dense runs), so a value does not depend on the path it took;
// the default NaN converts to 0x7e00. A double converts through float, as in PyTorch.
struct float16 {
  uint16_t bits = 0;

  constexpr float16() = default;
  constexpr float16(float value) : bits(round_to_bits(value)) {}  // NOLINT: implicit like a float
  constexpr operator float() const { return to_float(bits); }

  static constexpr float16 from_bits(uint16_t b) {
    float16 r;
    r.bits = b;
    return r;
  }
  static constexpr uint16_t round_to_bits(float value) {
    const uint32_t u = std::bit_cast<uint32_t>(value);
    const uint32_t sign = (u >> 16) & 0x8000u, a = u & 0x7fffffffu;
    if (a > 0x7f800000u) return uint16_t(sign | 0x7e00u | ((a >> 13) & 0x3ffu));  // NaN, quieted
    if (a >= 0x477ff000u) return uint16_t(sign | 0x7c00u);  // 65520 (halfway past 65504, odd) and up: inf
    if (a >= 0x38800000u) {                                 // 2^-14 and up: a normal half
      const uint32_t rounded = a + 0xfffu + ((a >> 13) & 1u);  // to nearest even at bit 13
      return uint16_t(sign | ((rounded - 0x38000000u) >> 13));  // exponent bias 127 -> 15
    }
    // Subnormal (or zero): the value in units of 2^-24, rounded to nearest even.
    const uint32_t e = a >> 23;
    if (e < 101) return uint16_t(sign);  // below 2^-26: rounds to zero (float subnormals included)
    const uint32_t m = (a & 0x7fffffu) | 0x800000u, shift = 126 - e;  // value = m * 2^(e - 150)
    const uint32_t q = m >> shift, rest = m & ((1u << shift) - 1), half = 1u << (shift - 1);
    return uint16_t(sign | (q + (rest > half || (rest == half && (q & 1u)))));
  }
  static constexpr float to_float(uint16_t h) {
    const uint32_t sign = uint32_t(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
    if (e == 0x1f) return std::bit_cast<float>(sign | 0x7f800000u | (m ? 0x400000u | (m << 13) : 0u));  // inf, NaN
    if (e == 0) {
      const float v = float(m) * 0x1p-24f;  // exact: m < 2^10
      return sign ? -v : v;
    }
    return std::bit_cast<float>(sign | ((e + 112) << 23) | (m << 13));
  }
};

inline std::ostream& operator<<(std::ostream& out, float16 v) { return out << float(v); }

enum class ScalarType : uint8_t { Float, Double, Int32, Int64, Bool, BFloat16, Half };

// torch's dtype names: kiln::kHalf is torch::kHalf (AnyTensor::to(kiln::kHalf)).
inline constexpr ScalarType kFloat = ScalarType::Float, kFloat32 = ScalarType::Float;
inline constexpr ScalarType kDouble = ScalarType::Double, kFloat64 = ScalarType::Double;
inline constexpr ScalarType kInt = ScalarType::Int32, kInt32 = ScalarType::Int32;
inline constexpr ScalarType kLong = ScalarType::Int64, kInt64 = ScalarType::Int64;
inline constexpr ScalarType kBool = ScalarType::Bool, kBFloat16 = ScalarType::BFloat16;
inline constexpr ScalarType kHalf = ScalarType::Half, kFloat16 = ScalarType::Half;

// The 16-bit floating types, stored 16-bit and computed in float.
template <class T>
inline constexpr bool is_half_v = std::is_same_v<T, bfloat16> || std::is_same_v<T, float16>;

template <class T>
inline constexpr bool is_dtype_v = std::is_same_v<T, float> || std::is_same_v<T, double> ||
                                   std::is_same_v<T, int32_t> || std::is_same_v<T, int64_t> ||
                                   std::is_same_v<T, bool> || is_half_v<T>;

// A type a Tensor can hold.
template <class T>
concept Dtype = is_dtype_v<T>;

template <class T>
inline constexpr bool is_floating_v =
    std::is_same_v<T, float> || std::is_same_v<T, double> || is_half_v<T>;

template <Dtype T>
constexpr ScalarType scalar_type_of() {
  if constexpr (std::is_same_v<T, float>) return ScalarType::Float;
  else if constexpr (std::is_same_v<T, double>) return ScalarType::Double;
  else if constexpr (std::is_same_v<T, int32_t>) return ScalarType::Int32;
  else if constexpr (std::is_same_v<T, int64_t>) return ScalarType::Int64;
  else if constexpr (std::is_same_v<T, bool>) return ScalarType::Bool;
  else if constexpr (std::is_same_v<T, bfloat16>) return ScalarType::BFloat16;
  else return ScalarType::Half;
}

// The type arithmetic on T is carried out in: float for bfloat16 and float16, T itself otherwise.
template <class T>
using compute_t = std::conditional_t<is_half_v<T>, float, T>;

constexpr const char* dtype_name(ScalarType t) {
  switch (t) {
    case ScalarType::Float: return "float32";
    case ScalarType::Double: return "float64";
    case ScalarType::Int32: return "int32";
    case ScalarType::Int64: return "int64";
    case ScalarType::Bool: return "bool";
    case ScalarType::BFloat16: return "bfloat16";
    case ScalarType::Half: return "float16";
  }
  return "?";
}

constexpr size_t element_size(ScalarType t) {
  switch (t) {
    case ScalarType::Float: case ScalarType::Int32: return 4;
    case ScalarType::Double: case ScalarType::Int64: return 8;
    case ScalarType::Bool: return 1;
    case ScalarType::BFloat16: case ScalarType::Half: return 2;
  }
  return 0;
}

inline std::ostream& operator<<(std::ostream& out, ScalarType t) { return out << dtype_name(t); }

}  // namespace kiln
