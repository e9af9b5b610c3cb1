#pragma once
// Command lines of the examples and of bench/serve_load: flags and their values, numbers checked, and the
// main() that turns --help, a bad argument and a failure into a message and an exit status.
#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <stdexcept>
#include <string>
#include <string_view>

namespace command_line {

struct ArgsError : std::invalid_argument {
  using std::invalid_argument::invalid_argument;
};

template <class Number>
Number parse_number(std::string_view flag, std::string_view text, Number low) {
  Number value{};
  const char* end = text.data() + text.size();
  const auto [ptr, ec] = std::from_chars(text.data(), end, value);
  if (ec != std::errc() || ptr != end || value < low)
    throw ArgsError(std::string(flag) + " expects a number of at least " + std::to_string(low) + ", got \"" +
                    std::string(text) + "\"");
  return value;
}

// Walks the flags of argv:
//   for (command_line::Flags f(argc, argv); f.next();)
//     if (f.flag() == "--epochs") epochs = f.number<int>(1);
//     else if (f.flag() == "--out") out = f.value();
//     else f.unknown();
class Flags {
 public:
  Flags(int argc, char** argv) : argc_(argc), argv_(argv) {}
  bool next() { return ++at_ < argc_; }
  std::string_view flag() const { return argv_[at_]; }
  // The argument after the flag.
  std::string_view value() {
    if (at_ + 1 >= argc_) throw ArgsError(std::string(flag()) + " needs a value");
    return argv_[++at_];
  }
  template <class Number>
  Number number(Number low) {
    const std::string_view name = flag();
    return parse_number<Number>(name, value(), low);
  }
  // A real number in [low, high].
  double real(double low, double high) {
    const std::string name(flag()), text(value());
    char* end = nullptr;
    const double v = std::strtod(text.c_str(), &end);
    if (end != text.c_str() + text.size() || !(v >= low && v <= high)) {
      char range[64];
      std::snprintf(range, sizeof range, "[%g, %g]", low, high);
      throw ArgsError(name + " expects a number in " + range + ", got \"" + text + "\"");
    }
    return v;
  }
  [[noreturn]] void unknown() const { throw ArgsError("unknown argument \"" + std::string(flag()) + "\""); }

 private:
  int argc_;
  char** argv_;
  int at_ = 0;
};

// main() of a program whose options parse(argc, argv) reads and run(options) uses: --help or -h prints the
// usage (exit 0); an ArgsError prints the reason and the usage (exit 2); another exception from run prints
// its message (exit 1).
template <class Parse, class Run>
int run_main(const char* program, const char* usage, int argc, char** argv, Parse parse, Run run) {
  decltype(parse(argc, argv)) options;
  try {
    for (int i = 1; i < argc; ++i)
      if (std::string_view(argv[i]) == "--help" || std::string_view(argv[i]) == "-h") {
        std::fputs(usage, stdout);
        return 0;
      }
    options = parse(argc, argv);
  } catch (const ArgsError& e) {
    std::fprintf(stderr, "%s: %s\n%s", program, e.what(), usage);
    return 2;
  }
  try {
    return run(options);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: %s\n", program, e.what());
    return 1;
  }
}

}  // namespace command_line
