#pragma once
// The error kiln's file readers throw when a file's content breaks its format (as opposed to the operating
// system's errors, which are plain std::runtime_error). Messages start with the file's path, or with what names
// an in-memory buffer: "model.safetensors: tensor \"w\": unknown dtype \"F8\"".
#include <stdexcept>

namespace kiln::io {

struct FormatError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

}  // namespace kiln::io
