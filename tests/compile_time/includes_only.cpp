// Every public header of kiln and nothing used: scripts/includes_only.py checks that this compiles no function of
// kiln, header-only and with KILN_SEPARATE_COMPILATION (docs/design.md). kiln/dist needs MPI and is left out;
// flex_attention's CUDA kernels are a header of their own. <kiln/cuda.hpp> is here without the one header that
// compiles code by design: cuda/tensor_hooks.hpp registers the CUDA backend with the core at static
// initialization, so every file that includes <kiln/cuda.hpp> compiles the device context's memory functions
// (about 0.9 s at -O2, measured 2026-12-03).
#include <kiln/attention.hpp>
#include <kiln/attention/flex_cuda.hpp>
#include <kiln/cuda/allocator.hpp>
#include <kiln/cuda/codegen.hpp>
#include <kiln/cuda/descriptor.hpp>
#include <kiln/cuda/driver.hpp>
#include <kiln/cuda/kernel_cache.hpp>
#include <kiln/cuda/nvrtc.hpp>
#include <kiln/cuda/runtime.hpp>
#include <kiln/data.hpp>
#include <kiln/dlpack.hpp>
#include <kiln/eigen.hpp>
#include <kiln/io.hpp>
#include <kiln/kiln.hpp>
#include <kiln/linalg.hpp>
#include <kiln/nn.hpp>
#include <kiln/optim.hpp>

int main() { return 0; }
