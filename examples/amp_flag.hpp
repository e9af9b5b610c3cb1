#pragma once
// The examples' --amp bf16|fp16: its value checked as the command line is read, then the autocast region of the
// forward pass and the loss on the training device (a guard that changes nothing without the flag); fp16 also
// takes a GradScaler (docs/amp.md).
#include <string>
#include <string_view>

#include "command_line.hpp"
#include "kiln/kiln.hpp"

namespace command_line {

inline std::string amp_flag(std::string_view text) {
  const std::string value(text);
  if (value != "bf16" && value != "fp16") throw ArgsError("--amp expects bf16 or fp16, got \"" + value + "\"");
  return value;
}

inline kiln::AutocastGuard amp_scope(const std::string& amp, kiln::Device device) {
  return kiln::AutocastGuard(device.type(), amp == "fp16" ? kiln::kHalf : kiln::kBFloat16, !amp.empty());
}

}  // namespace command_line
