// mlp: flatten, `depth` hidden layers (512 * width, default 2), a linear head; one block
// per layer, so it is also the balanced model of the pipeline benchmarks.
#include "dtrain/models/layers.h"
#include "dtrain/models/registry.h"

namespace dtrain::models {

torch::nn::Sequential make_mlp(const ModelConfig& c) {
  int64_t inputs = 1;
  for (int64_t d : c.input_shape)
    inputs *= d;
  const auto hidden = std::max<int64_t>(8, static_cast<int64_t>(512 * c.width));
  torch::nn::Sequential m;
  Stack fc1;
  fc1->push_back("flatten", torch::nn::Flatten());
  fc1->push_back("linear", torch::nn::Linear(inputs, hidden));
  fc1->push_back("relu", torch::nn::ReLU());
  m->push_back("fc1", fc1);
  if (c.depth < 1) throw std::invalid_argument("mlp needs --depth of at least 1");
  for (int64_t i = 2; i <= c.depth; ++i)
    m->push_back("fc" + std::to_string(i),
                 Stack(torch::nn::Linear(hidden, hidden), torch::nn::ReLU()));
  m->push_back("head", torch::nn::Linear(hidden, c.num_classes));
  return m;
}

extern const ModelFamily kMlpModel{"mlp",
                                   "--depth hidden layers (default 2) of 512 x width, ReLU",
                                   make_mlp,
                                   ModelInput::kImage,
                                   {1, 28, 28}};

}  // namespace dtrain::models
