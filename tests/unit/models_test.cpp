// The model zoo: shapes, block composition, reference parameter counts.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "dtrain/models/memory_format.h"
#include "dtrain/models/registry.h"

namespace dtrain::models {
namespace {

ModelConfig config(const std::string& name, std::vector<int64_t> shape, int64_t classes = 10) {
  ModelConfig c;
  c.name = name;
  c.in_channels = shape[0];
  c.input_shape = shape;
  c.num_classes = classes;
  return c;
}

TEST(ModelZooTest, ReferenceParameterCounts) {
  EXPECT_EQ(parameter_count(*make_model(config("resnet18", {3, 32, 32}))),
            11173962);  // kuangliu/pytorch-cifar
  EXPECT_EQ(parameter_count(*make_model(config("mobilenetv2", {3, 32, 32}))),
            2236682);  // torchvision
}

TEST(ModelZooTest, EveryModelOnEveryInputShapeAndBlocksComposeToTheModel) {
  torch::manual_seed(0);
  for (const ModelFamily* family : model_families()) {
    if (family->input == ModelInput::kTokens) continue;  // text: roberta_test.cpp
    const std::string& name = family->name;
    for (const auto& shape : std::vector<std::vector<int64_t>>{{1, 28, 28}, {3, 32, 32}}) {
      auto model = make_model(config(name, shape, 7));
      model->eval();
      std::vector<int64_t> batch_shape{2};
      batch_shape.insert(batch_shape.end(), shape.begin(), shape.end());
      const torch::Tensor x = torch::randn(batch_shape);
      const torch::Tensor whole = model->forward(x);
      EXPECT_EQ(whole.sizes(), (std::vector<int64_t>{2, 7})) << name;
      torch::Tensor y = x;
      int64_t block_params = 0;
      for (auto& block : *model) {
        y = block.forward(y);
        block_params += parameter_count(*block.ptr());
      }
      EXPECT_TRUE(torch::equal(y, whole)) << name << ": blocks do not compose to the model";
      EXPECT_EQ(block_params, parameter_count(*model)) << name;
      const auto info = describe(model, torch::zeros(batch_shape).narrow(0, 0, 1));
      EXPECT_EQ(info.size(), model->size());
      EXPECT_EQ(info.back().output_shape, (std::vector<int64_t>{7})) << name;
    }
  }
}

// The client/server split of a MobileNetV2: 32x32x32 out of its first layer, 1280x4x4 into
// its last ones.
TEST(ModelZooTest, FirstAndLastBoundariesHaveTheUShapesShapes) {
  auto model = make_model(config("mobilenetv2", {3, 32, 32}));
  const auto info = describe(model, torch::zeros({1, 3, 32, 32}));
  EXPECT_EQ(info.front().output_shape,
            (std::vector<int64_t>{32, 32, 32}));  // after the first layer
  const auto& head = info[info.size() - 2];
  EXPECT_EQ(head.name, "head");
  EXPECT_EQ(head.output_shape, (std::vector<int64_t>{1280, 4, 4}));  // into the last layers
}

TEST(ModelZooTest, CnnAndMlpBlocksForPipelines) {
  auto cnn = make_model(config("cnn", {1, 28, 28}));
  const auto info = describe(cnn, torch::zeros({1, 1, 28, 28}));
  ASSERT_EQ(info.size(), 3u);  // f1l1 leaves conv2 alone on the server
  EXPECT_EQ(info[0].output_shape, (std::vector<int64_t>{32, 14, 14}));
  EXPECT_EQ(info[1].output_shape, (std::vector<int64_t>{64, 7, 7}));
  auto c = config("mlp", {1, 28, 28});
  c.depth = 8;
  EXPECT_EQ(make_model(c)->size(), 9u);
  c.depth = 0;
  EXPECT_THROW(make_model(c), std::invalid_argument);
}

TEST(MemoryFormatTest, AutoIsChannelsLastOnTheCpuForConvolutions) {
  using models::MemoryFormat;
  const c10::Device cpu(c10::kCPU), cuda(c10::kCUDA, 0);
  models::ModelConfig mc;
  for (const char* name : {"cnn", "resnet18", "mobilenetv2", "mlp"}) {
    mc.name = name;
    const auto model = models::make_model(mc);
    const bool convolutions = std::string(name) != "mlp";
    EXPECT_EQ(models::resolve_memory_format(MemoryFormat::kAuto, *model, cpu),
              convolutions ? MemoryFormat::kChannelsLast : MemoryFormat::kContiguous)
        << name;
    EXPECT_EQ(models::resolve_memory_format(MemoryFormat::kAuto, *model, cuda),
              MemoryFormat::kContiguous)
        << name;
    EXPECT_EQ(models::resolve_memory_format(MemoryFormat::kContiguous, *model, cpu),
              MemoryFormat::kContiguous);
  }
  EXPECT_EQ(models::parse_memory_format("channels-last"), MemoryFormat::kChannelsLast);
  EXPECT_THROW(models::parse_memory_format("nhwc"), std::invalid_argument);
}

// The same model twice from one seed: contiguous, and placed channels-last.
std::pair<torch::nn::Sequential, torch::nn::Sequential> layout_twins(const std::string& name,
                                                                     std::vector<int64_t> shape,
                                                                     double width = 1.0) {
  models::ModelConfig mc;
  mc.name = name;
  mc.width = width;
  mc.in_channels = shape[0];
  mc.input_shape = std::move(shape);
  torch::manual_seed(4);
  auto contiguous = models::make_model(mc);
  torch::manual_seed(4);
  auto channels_last = models::make_model(mc);
  models::place(*channels_last, c10::Device(c10::kCPU), models::MemoryFormat::kChannelsLast);
  return {contiguous, channels_last};
}

// Only the layout changes: the same weights give the same outputs and gradients. One input
// channel and depthwise weights are laid out both ways ([O, 1, k, k]), as are 1x1 kernels:
// they get NHWC strides all the same, since a convolution reads the layout from them.
TEST(MemoryFormatTest, ChannelsLastComputesWhatContiguousDoes) {
  auto [contiguous, channels_last] = layout_twins("mobilenetv2", {1, 28, 28}, 0.25);
  const at::Tensor first = channels_last->parameters()[0];
  for (const auto& p : channels_last->parameters()) {
    if (p.dim() == 4) {
      EXPECT_EQ(p.stride(1), 1) << p.sizes();
    }
  }
  contiguous->eval();  // dropout off: both see the same function
  channels_last->eval();
  const at::Tensor x = torch::randn({4, 1, 28, 28});
  const at::Tensor a = contiguous->forward(x), b = channels_last->forward(x);
  EXPECT_LE((a - b).abs().max().item<double>(), 1e-4 * (1 + a.abs().max().item<double>()));
  a.sum().backward();
  b.sum().backward();
  const at::Tensor ga = contiguous->parameters()[0].grad(), gb = first.grad();
  EXPECT_LE((ga - gb).abs().max().item<double>(), 1e-3 * (1 + ga.abs().max().item<double>()));
  EXPECT_TRUE(gb.stride(1) == 1) << gb.strides();
}

// Training steps (BatchNorm's running statistics included) stay the same function too.
TEST(MemoryFormatTest, ChannelsLastTrainsAsContiguousDoes) {
  auto [contiguous, channels_last] = layout_twins("resnet18", {3, 16, 16});
  torch::manual_seed(5);
  const at::Tensor x = torch::randn({8, 3, 16, 16});
  const at::Tensor y = torch::randint(0, 10, {8});
  for (auto* model : {&contiguous, &channels_last}) {
    torch::optim::SGD sgd((*model)->parameters(), torch::optim::SGDOptions(0.05).momentum(0.9));
    (*model)->train();
    for (int step = 0; step < 3; ++step) {
      sgd.zero_grad();
      torch::nn::functional::cross_entropy((*model)->forward(x), y).backward();
      sgd.step();
    }
    (*model)->eval();
  }
  torch::NoGradGuard no_grad;
  const at::Tensor a = contiguous->forward(x), b = channels_last->forward(x);
  // Convolutions sum in another order in each layout, and three momentum steps amplify
  // that to about 0.3 %; a layout mistake (a weight read transposed) gives outputs unrelated.
  EXPECT_LE((a - b).abs().max().item<double>(), 1e-2 * a.abs().max().item<double>());
}

// The model table: every row builds on its default input and is found by its name, which
// the help text lists; the text model reads token ids.
TEST(ModelZooTest, EveryRowOfTheTableBuildsOnItsDefaultInput) {
  const std::string names = model_names();
  for (const ModelFamily* family : model_families()) {
    SCOPED_TRACE(family->name);
    EXPECT_EQ(find_model(family->name), family);
    EXPECT_NE(names.find(family->name), std::string::npos) << names;
    EXPECT_FALSE(family->help.empty());
    ModelConfig c = config(family->name, family->default_input, 5);
    if (family->input == ModelInput::kTokens) {  // a small encoder: the shapes, not the size
      c.transformer.layers = 1;
      c.transformer.hidden = 16;
      c.transformer.heads = 2;
      c.transformer.vocab = 100;
    }
    EXPECT_EQ(takes_tokens(c), family->input == ModelInput::kTokens);
    auto model = make_model(c);
    model->eval();
    const at::Tensor out = model->forward(sample_input(c, 2));
    EXPECT_EQ(out.sizes(), (std::vector<int64_t>{2, 5}));
  }
  EXPECT_EQ(find_model("vgg"), nullptr);
}

TEST(ModelZooTest, BadNamesAndShapesAreRejected) {
  EXPECT_THROW(make_model(config("vgg", {1, 28, 28})), std::invalid_argument);
  auto c = config("cnn", {1, 28, 28});
  c.in_channels = 3;
  EXPECT_THROW(make_model(c), std::invalid_argument);
  EXPECT_THROW(make_model(config("cnn", {1, 2, 2})), std::invalid_argument);
}

}  // namespace
}  // namespace dtrain::models
