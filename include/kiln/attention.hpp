#pragma once
// kiln's attention (optional: not part of <kiln/kiln.hpp>): FlexAttention-style fused attention with
// compile-time score and mask modifiers (attention/flex_attention.hpp), block masks, ready-made modifiers,
// F::scaled_dot_product_attention and nn::MultiheadAttention on top of it.
#include "kiln/attention/block_mask.hpp"
#include "kiln/attention/flex_attention.hpp"
#include "kiln/attention/mods.hpp"
#include "kiln/attention/modifier.hpp"
#include "kiln/attention/multihead.hpp"
#include "kiln/attention/sdpa.hpp"
