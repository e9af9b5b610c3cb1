// The compiled part of kiln's own separately compiled programs (the examples and tests/separate, all built with
// -DKILN_SEPARATE_COMPILATION): the one translation unit that compiles the bodies their other units only declare
// (core/config.hpp, docs/design.md). A program of yours does the same with a .cpp of these lines.
#include <kiln/separate_compilation.hpp>
