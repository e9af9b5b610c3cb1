#pragma once
// kiln::optim: SGD, Adam, AdamW, RMSprop, LR schedulers, gradient clipping and kiln::GradScaler (opt-in, not
// behind <kiln/kiln.hpp>).
#include "kiln/optim/adam.hpp"
#include "kiln/optim/rmsprop.hpp"
#include "kiln/optim/sgd.hpp"
#include "kiln/optim/clip_grad.hpp"
#include "kiln/optim/grad_scaler.hpp"
#include "kiln/optim/lr_scheduler.hpp"
