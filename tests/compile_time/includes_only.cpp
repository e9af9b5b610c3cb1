// Every public header of kiln and nothing used: scripts/includes_only.py checks that this compiles no function of
// kiln, header-only and with KILN_SEPARATE_COMPILATION (docs/design.md). kiln/dist needs MPI and is left out;
// flex_attention's CUDA kernels are a header of their own.
#include <kiln/attention.hpp>
#include <kiln/attention/flex_cuda.hpp>
#include <kiln/cuda.hpp>
#include <kiln/data.hpp>
#include <kiln/dlpack.hpp>
#include <kiln/eigen.hpp>
#include <kiln/io.hpp>
#include <kiln/kiln.hpp>
#include <kiln/linalg.hpp>
#include <kiln/nn.hpp>
#include <kiln/optim.hpp>

int main() { return 0; }
