#pragma once
// kiln::nn: modules, layers and losses (opt-in, not behind <kiln/kiln.hpp>: it brings Eigen's GEMM).
#include "kiln/nn/conv.hpp"
#include "kiln/nn/layers.hpp"
#include "kiln/nn/loss.hpp"
#include "kiln/nn/module.hpp"
#include "kiln/nn/normalization.hpp"
#include "kiln/nn/pool.hpp"
#include "kiln/nn/recurrent.hpp"
