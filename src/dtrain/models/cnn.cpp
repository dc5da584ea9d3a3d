// cnn: a small conv net sized for 28x28 inputs (any HxW >= 4 works):
// conv(32) pool, conv(64) pool, fc(128), head. Widths scale with --width. Three blocks
// (conv1, conv2, classifier) so the U-shape's f1l1 split leaves both boundaries large
// (32x14x14 and 64x7x7 per 28x28 sample), as mobilenetv2's are in a client/server split.
#include "dtrain/models/layers.h"
#include "dtrain/models/registry.h"

namespace dtrain::models {

torch::nn::Sequential make_cnn(const ModelConfig& c) {
  const auto w1 = std::max<int64_t>(4, static_cast<int64_t>(32 * c.width));
  const auto w2 = std::max<int64_t>(4, static_cast<int64_t>(64 * c.width));
  const auto hidden = std::max<int64_t>(8, static_cast<int64_t>(128 * c.width));
  const int64_t h = c.input_shape[1] / 4, w = c.input_shape[2] / 4;
  if (h < 1 || w < 1) throw std::invalid_argument("cnn needs inputs of at least 4x4");
  auto conv = [](int64_t in, int64_t out) {
    return Stack(torch::nn::Conv2d(torch::nn::Conv2dOptions(in, out, 3).padding(1)),
                 torch::nn::ReLU(), torch::nn::MaxPool2d(torch::nn::MaxPool2dOptions(2)));
  };
  torch::nn::Sequential m;
  m->push_back("conv1", conv(c.in_channels, w1));
  m->push_back("conv2", conv(w1, w2));
  m->push_back("classifier",
               Stack(torch::nn::Flatten(), torch::nn::Linear(w2 * h * w, hidden), torch::nn::ReLU(),
                     torch::nn::Dropout(0.25), torch::nn::Linear(hidden, c.num_classes)));
  return m;
}

extern const ModelFamily kCnnModel{"cnn",
                                   "2 conv+pool layers (32, 64) and fc 128, for 28x28",
                                   make_cnn,
                                   ModelInput::kImage,
                                   {1, 28, 28}};

}  // namespace dtrain::models
