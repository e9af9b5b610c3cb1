#pragma once
// PNG through libpng, from and to memory. Decoding turns every color type and bit depth into 8-bit gray
// (palette and RGB through libpng's luminance weights, 16 bits scaled down, alpha composited over black)
// and refuses, before allocating anything, an image whose declared size is over the limit.
//
// libpng reports errors by longjmp. The functions that call setjmp keep every C++ object they own outside
// their own frame (in a state struct of the caller's) and create none after setjmp, so a longjmp back to
// them skips no destructor and finds no local changed since setjmp.
#include <png.h>

#include <csetjmp>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "image.hpp"

namespace serve {

inline bool looks_like_png(std::string_view bytes) {
  return bytes.size() >= 8 && png_sig_cmp(reinterpret_cast<png_const_bytep>(bytes.data()), 0, 8) == 0;
}

namespace detail {

// libpng's messages end up here; the error callback jumps back to the setjmp of the caller.
struct PngStatus {
  char message[200] = "";
};
inline void on_png_error(png_structp png, png_const_charp message) {
  auto* status = static_cast<PngStatus*>(png_get_error_ptr(png));
  std::snprintf(status->message, sizeof status->message, "%s", message);
  png_longjmp(png, 1);
}
inline void on_png_warning(png_structp, png_const_charp) {}

struct PngDecodeState {
  PngStatus status;
  std::string_view bytes;
  size_t read = 0;
  uint32_t width = 0, height = 0;
  int channels = 0;  // after the transformations: 1 (gray) or 2 (gray and alpha)
  std::vector<unsigned char> samples;
  std::vector<png_bytep> rows;
};

inline void read_png_bytes(png_structp png, png_bytep out, size_t count) {
  auto* s = static_cast<PngDecodeState*>(png_get_io_ptr(png));
  if (count > s->bytes.size() - s->read) png_error(png, "the file is truncated");
  std::memcpy(out, s->bytes.data() + s->read, count);
  s->read += count;
}

inline bool png_decode_with_libpng(png_structp png, png_infop info, PngDecodeState* s, const ImageLimits* limits) {
  if (setjmp(png_jmpbuf(png))) return false;
  png_set_read_fn(png, s, read_png_bytes);
  png_set_user_limits(png, png_uint_32(limits->max_side), png_uint_32(limits->max_side));
  png_set_chunk_malloc_max(png, png_alloc_size_t(1) << 20);  // ancillary chunks (text, ICC profiles) up to 1 MiB
  png_read_info(png, info);
  const int color_type = png_get_color_type(png, info), bit_depth = png_get_bit_depth(png, info);
  if (bit_depth == 16) png_set_scale_16(png);
  if (color_type == PNG_COLOR_TYPE_PALETTE) png_set_palette_to_rgb(png);
  if (color_type == PNG_COLOR_TYPE_GRAY && bit_depth < 8) png_set_expand_gray_1_2_4_to_8(png);
  if (png_get_valid(png, info, PNG_INFO_tRNS)) png_set_tRNS_to_alpha(png);
  if (color_type & PNG_COLOR_MASK_COLOR) png_set_rgb_to_gray_fixed(png, 1, -1, -1);  // libpng's default weights
  png_set_interlace_handling(png);
  png_read_update_info(png, info);
  s->width = png_get_image_width(png, info);
  s->height = png_get_image_height(png, info);
  s->channels = png_get_channels(png, info);
  const size_t row_bytes = png_get_rowbytes(png, info);
  if ((s->channels != 1 && s->channels != 2) || row_bytes != size_t(s->width) * size_t(s->channels))
    png_error(png, "unexpected layout after conversion to 8-bit gray");
  s->samples.resize(row_bytes * s->height);
  s->rows.resize(s->height);
  for (uint32_t y = 0; y < s->height; ++y) s->rows[y] = s->samples.data() + size_t(y) * row_bytes;
  png_read_image(png, s->rows.data());
  png_read_end(png, nullptr);
  return true;
}

// Width and height as IHDR declares them, when the file starts with IHDR as it must.
inline bool png_declared_size(std::string_view bytes, int64_t& width, int64_t& height) {
  if (bytes.size() < 24 || bytes.substr(12, 4) != "IHDR") return false;
  auto big_endian = [&](size_t at) {
    int64_t v = 0;
    for (size_t i = at; i < at + 4; ++i) v = v << 8 | static_cast<unsigned char>(bytes[i]);
    return v;
  };
  width = big_endian(16);
  height = big_endian(20);
  return true;
}

}  // namespace detail

inline GrayImage decode_png(std::string_view bytes, const ImageLimits& limits) {
  if (!looks_like_png(bytes)) throw UnsupportedImageFormat("PNG: the file does not start with the PNG signature");
  // The same check libpng makes (png_set_user_limits), first, for a message that names the limit.
  if (int64_t width, height; detail::png_declared_size(bytes, width, height))
    check_declared_size("PNG", width, height, limits);
  detail::PngDecodeState state;
  state.bytes = bytes;
  png_structp png = png_create_read_struct(PNG_LIBPNG_VER_STRING, &state.status, detail::on_png_error,
                                           detail::on_png_warning);
  png_infop info = png ? png_create_info_struct(png) : nullptr;
  const bool ok = info && detail::png_decode_with_libpng(png, info, &state, &limits);
  png_destroy_read_struct(&png, &info, nullptr);
  if (!ok) throw ImageError(std::string("PNG: ") + (state.status.message[0] ? state.status.message : "out of memory"));

  GrayImage image{state.width, state.height, std::vector<float>(size_t(state.width) * state.height)};
  for (size_t i = 0; i < image.pixels.size(); ++i) {
    const float gray = state.samples[i * size_t(state.channels)];
    const float alpha = state.channels == 2 ? state.samples[i * 2 + 1] / 255.0f : 1.0f;
    image.pixels[i] = gray * alpha / 255.0f;
  }
  return image;
}

namespace detail {

struct PngEncodeState {
  PngStatus status;
  std::string out;
  std::vector<png_const_bytep> rows;
};

inline void write_png_bytes(png_structp png, png_bytep data, size_t count) {
  static_cast<PngEncodeState*>(png_get_io_ptr(png))->out.append(reinterpret_cast<const char*>(data), count);
}

inline bool png_encode_with_libpng(png_structp png, png_infop info, PngEncodeState* s, uint32_t width,
                                   uint32_t height, int color_type) {
  if (setjmp(png_jmpbuf(png))) return false;
  png_set_write_fn(png, s, write_png_bytes, nullptr);
  png_set_IHDR(png, info, width, height, 8, color_type, PNG_INTERLACE_NONE, PNG_COMPRESSION_TYPE_DEFAULT,
               PNG_FILTER_TYPE_DEFAULT);
  png_write_info(png, info);
  png_write_image(png, const_cast<png_bytepp>(s->rows.data()));  // libpng only reads the rows
  png_write_end(png, nullptr);
  return true;
}

}  // namespace detail

// 8-bit samples, row-major: `channels` 1 (gray) or 3 (RGB) bytes per pixel.
inline std::string encode_png(const unsigned char* samples, uint32_t width, uint32_t height, int channels) {
  if (channels != 1 && channels != 3) throw std::invalid_argument("encode_png: channels must be 1 or 3");
  detail::PngEncodeState state;
  for (uint32_t y = 0; y < height; ++y) state.rows.push_back(samples + size_t(y) * width * size_t(channels));
  png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, &state.status, detail::on_png_error,
                                            detail::on_png_warning);
  png_infop info = png ? png_create_info_struct(png) : nullptr;
  const bool ok = info && detail::png_encode_with_libpng(png, info, &state, width, height,
                                                         channels == 1 ? PNG_COLOR_TYPE_GRAY : PNG_COLOR_TYPE_RGB);
  png_destroy_write_struct(&png, &info);
  if (!ok) throw std::runtime_error(std::string("encode_png: ") + (state.status.message[0] ? state.status.message : "out of memory"));
  return std::move(state.out);
}

}  // namespace serve
