// What Pipeline's own files (pipeline.cpp, pipeline_delta.cpp) share about one step in
// flight; not part of Pipeline's interface.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <map>
#include <utility>
#include <vector>

#include "dtrain/parallel/pipeline/pipeline.h"

namespace dtrain::parallel::pipeline {

struct Pipeline::Live {
  at::Tensor input, output, loss;
};

struct Pipeline::Step {
  bool training = false;
  int64_t batch = 0;
  std::vector<int64_t> sizes;  // samples per micro-batch
  const Schedule* schedule = nullptr;
  int last_stage = 0;
  int loss_rank = 0;
  std::vector<at::Tensor> input_chunks, label_chunks, mask_chunks;  // driver only
  std::vector<at::Tensor> id_chunks;         // delta coding, training: every rank
  std::map<std::pair<int, int>, Live> live;  // (stage, micro-batch) awaiting backward
  std::map<int, at::Tensor> received_masks;  // followers: by micro-batch
  StepResult result;
};

}  // namespace dtrain::parallel::pipeline
