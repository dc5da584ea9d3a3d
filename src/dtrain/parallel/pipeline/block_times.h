// --balance auto's weights: what each block of a model costs to run.
#pragma once

#include <torch/nn/modules/container/sequential.h>

#include <vector>

namespace dtrain::parallel::pipeline {

// Mean forward+backward seconds of each block of `model` on `input`, over `repeats`
// passes after one warm-up: the weights of --balance auto. The model and input share a
// device; on a GPU each block is timed from a synchronized device to its end. Blocks that
// read a batch's attention mask read the caller's scope (models/batch_context.h).
std::vector<double> measure_block_times(torch::nn::Sequential& model, const at::Tensor& input,
                                        int repeats);

}  // namespace dtrain::parallel::pipeline
