#pragma once
// The compiled part of a program built with KILN_SEPARATE_COMPILATION (core/config.hpp, docs/design.md):
// include this header in exactly one .cpp of the program, before any other kiln header, and define
// KILN_SEPARATE_COMPILATION in every translation unit (-DKILN_SEPARATE_COMPILATION), this one included:
//
//   // kiln_part.cpp
//   #include <kiln/separate_compilation.hpp>
//
// That unit compiles the bodies the other units only declare: the runtime under every tensor (storage and the
// caching allocator, shape checks, the loop driver, the autograd engine and its non-template nodes), the nn layers
// and Module, the float losses and optimizers, and gradient clipping. It is compiled with the program's own flags, so its
// kernels are built for the same SIMD target as the rest of the program.
#if !defined(KILN_SEPARATE_COMPILATION)
#error "kiln: <kiln/separate_compilation.hpp> is the compiled part of a program built with -DKILN_SEPARATE_COMPILATION"
#endif
#if defined(KILN_VERSION_MAJOR)
#error "kiln: include <kiln/separate_compilation.hpp> before any other kiln header of its translation unit"
#endif

#define KILN_COMPILING_SEPARATE_PART 1

#include "kiln/data.hpp"
#include "kiln/kiln.hpp"
#include "kiln/nn.hpp"
#include "kiln/optim.hpp"
