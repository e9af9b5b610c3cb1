#pragma once
// An option with a chainable setter and a getter, as libtorch's TORCH_ARG: Options(0.1).momentum(0.9).
// (It leaves the members that follow it private.)
#define KILN_OPTION(type, name, default_value)     \
 public:                                           \
  auto& name(type value) {                         \
    name##_ = value;                               \
    return *this;                                  \
  }                                                \
  type name() const { return name##_; }            \
                                                   \
 private:                                          \
  type name##_ = default_value
