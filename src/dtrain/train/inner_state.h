// The inner optimizer's state as one float32 vector, so that an elastic replica that enters
// can take the members' instead of starting afresh (docs/elastic.md: a fresh AdamW's first
// steps move every coordinate by about the learning rate, and under many deaths that cost
// the run accuracy).
//
// Layout, parameter by parameter in the optimizer's order: Adam and AdamW [step, exp_avg_sq]
// (step 0: no state yet); SGD [present, momentum_buffer] (present 0 or 1; nothing where
// momentum is 0). Adam's first moments are not carried: unpacked, they start at zero, so the
// taker's first steps are small and grow over about 1 / (1 - beta1) steps as its own
// gradients fill them (as accurate as carrying them under 70 deaths, docs/elastic.md, in
// half the bytes). Another optimizer, or AMSGrad, carries no state (0 values):
// it starts afresh. Every value is per coordinate, so a vector put together from the parts
// of several members' (each donor sends an equal part) is still a state each coordinate of
// which one member held; a parameter's step count and some of its moments may come from two
// members, whose counts differ by a round's steps at most (every member's descends from the
// founders' with its moments), so Adam's bias correction stays what each moment needs.
#pragma once

#include <ATen/core/Tensor.h>
#include <torch/optim/optimizer.h>

#include <cstdint>

namespace dtrain::train {

// The vector's size for this optimizer and its parameters (state or none yet).
int64_t inner_state_values(const torch::optim::Optimizer& optimizer);
at::Tensor pack_inner_state(const torch::optim::Optimizer& optimizer);
// The steps the state has seen: Adam's and AdamW's count of the first parameter with state
// (0 with none, and for other optimizers).
int64_t inner_state_steps(const torch::optim::Optimizer& optimizer);
// Replaces the optimizer's state with `state` (a step of 0: none, as a fresh one's). Throws
// std::invalid_argument where its size is not inner_state_values(optimizer).
void unpack_inner_state(torch::optim::Optimizer& optimizer, const at::Tensor& state);

}  // namespace dtrain::train
