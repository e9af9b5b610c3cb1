#pragma once
// The examples' --device cpu|cuda|cuda:N: its value checked as the command line is read, then turned into the
// kiln::Device to train on, refused with the reason where this machine (or this build) has no such device.
#include <stdexcept>
#include <string>
#include <string_view>

#include "command_line.hpp"
#include "kiln/kiln.hpp"

namespace command_line {

inline std::string device_flag(std::string_view text) {
  const std::string value(text);
  try {
    (void)kiln::Device(value);
  } catch (const std::invalid_argument&) {
    throw ArgsError("--device expects cpu, cuda or cuda:N, got \"" + value + "\"");
  }
  return value;
}

inline kiln::Device training_device(const std::string& flag) {
  const kiln::Device device(flag);
#ifdef KILN_WITH_CUDA
  kiln::check(device.is_cpu() || (kiln::cuda::is_available() && device.index() < kiln::cuda::device_count()), "--device ",
              flag, ": this machine has no such CUDA device (",
              kiln::cuda::is_available() ? kiln::cuda::device_count() : 0, " found)");
#else
  kiln::check(device.is_cpu(), "--device ", flag, ": this build has no CUDA support (build with -DKILN_WITH_CUDA)");
#endif
  return device;
}

}  // namespace command_line
