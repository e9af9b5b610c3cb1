#pragma once
// The emulated device's "cubin": a magic word, the length, and a host shared library's bytes (cuModuleLoadData
// gets only a pointer, so the length travels with the image, as an ELF's sizes do in a real cubin).
#include <cstdint>
#include <cstring>
#include <string>

namespace kiln::emulated {

inline constexpr char kImageMagic[8] = {'K', 'I', 'L', 'N', 'E', 'M', 'U', '1'};

inline std::string wrap_image(const std::string& library) {
  std::string image(kImageMagic, 8);
  const uint64_t n = library.size();
  image.append(reinterpret_cast<const char*>(&n), 8);
  return image + library;
}

// The library's bytes, or an empty string when `image` is not one of these.
inline std::string unwrap_image(const void* image) {
  const char* p = static_cast<const char*>(image);
  if (std::memcmp(p, kImageMagic, 8) != 0) return {};
  uint64_t n = 0;
  std::memcpy(&n, p + 8, 8);
  return std::string(p + 16, n);
}

}  // namespace kiln::emulated
