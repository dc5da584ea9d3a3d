// The roberta model: Hugging Face's parameter count, logits against an independent float64
// reference (tests/python/roberta_reference.py) reading the same safetensors file, the
// attention mask (padding changes nothing), blocks composing to the model, and the
// weights loader's reports and errors.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <map>

#include "dtrain/compress/codec.h"
#include "dtrain/models/batch_context.h"
#include "dtrain/models/registry.h"
#include "dtrain/models/roberta.h"
#include "dtrain/models/safetensors.h"
#include "dtrain/models/weights.h"

namespace dtrain::models {
namespace {

// std::filesystem is avoided here: libtorch.so exports symbols of its own build of it, and
// a call can land in that one and crash.
struct TempDir {
  TempDir() {
    char templ[] = "/tmp/dtrain-roberta-XXXXXX";
    path = mkdtemp(templ);
  }
  ~TempDir() {
    for (const char* name : {"w.safetensors", "in.safetensors", "out.safetensors"})
      std::remove((path + "/" + name).c_str());
    rmdir(path.c_str());
  }
  std::string operator/(const std::string& name) const { return path + "/" + name; }
  std::string path;
};

ModelConfig small_config(int64_t length = 12) {
  ModelConfig c;
  c.name = "roberta";
  c.num_classes = 3;
  c.input_shape = {length};
  c.transformer.layers = 2;
  c.transformer.hidden = 32;
  c.transformer.heads = 4;
  c.transformer.vocab = 50;
  c.transformer.max_positions = 40;
  return c;
}

// Every parameter away from its initial value (unit LayerNorms and zero biases would hide
// a mistake in their use).
void randomize(torch::nn::Sequential& model, uint64_t seed) {
  torch::manual_seed(seed);
  torch::NoGradGuard no_grad;
  for (auto& p : model->parameters())
    p.normal_(0, 0.3);
}

std::map<std::string, at::Tensor> huggingface_named(torch::nn::Sequential& model) {
  std::map<std::string, at::Tensor> out;
  for (const auto& p : model->named_parameters())
    out[roberta_weight_names(p.key()).front()] = p.value();
  return out;
}

at::Tensor logits_of(torch::nn::Sequential& model, const at::Tensor& ids, const at::Tensor& mask) {
  torch::NoGradGuard no_grad;
  model->eval();
  const AttentionMaskScope scope(mask);
  return model->forward(ids);
}

// Two padded rows: ids of real tokens, then padding (id 1) with mask 0.
std::pair<at::Tensor, at::Tensor> padded_batch(int64_t length) {
  auto ids = torch::full({2, length}, 1, torch::kLong);
  auto mask = torch::zeros({2, length}, torch::kByte);
  const std::vector<std::vector<int64_t>> rows{{0, 7, 8, 9, 2}, {0, 11, 23, 4, 5, 48, 30, 2}};
  for (size_t r = 0; r < rows.size(); ++r)
    for (size_t t = 0; t < rows[r].size(); ++t) {
      ids[static_cast<int64_t>(r)][static_cast<int64_t>(t)] = rows[r][t];
      mask[static_cast<int64_t>(r)][static_cast<int64_t>(t)] = 1;
    }
  return {ids, mask};
}

TEST(RobertaTest, RobertaBaseHasHuggingFacesParameterCount) {
  ModelConfig c;
  c.name = "roberta";
  c.num_classes = 2;
  c.input_shape = {128};
  auto model = make_model(c);
  EXPECT_EQ(parameter_count(*model), 124647170);  // RobertaForSequenceClassification, 2 labels
  EXPECT_EQ(model->size(), 14u);                  // embeddings, 12 layers, classifier
}

TEST(RobertaTest, LogitsMatchAnIndependentReferenceFromTheSameFile) {
  const TempDir dir;
  const ModelConfig c = small_config();
  auto source = make_model(c);
  randomize(source, 1);
  write_safetensors((dir / "w.safetensors"), huggingface_named(source));

  torch::manual_seed(2);
  auto model = make_model(c);  // other weights until loaded
  const WeightsReport report = load_weights(model, c, (dir / "w.safetensors"));
  EXPECT_TRUE(report.missing.empty()) << summary(report);
  EXPECT_TRUE(report.unexpected.empty()) << summary(report);
  const auto [ids, mask] = padded_batch(12);
  const at::Tensor ours = logits_of(model, ids, mask);

  write_safetensors((dir / "in.safetensors"), {{"ids", ids}, {"mask", mask}});
  const std::string command = std::string(DTRAIN_PYTHON) + " " + DTRAIN_SOURCE_DIR +
                              "/tests/python/roberta_reference.py " + (dir / "w.safetensors") +
                              " " + (dir / "in.safetensors") + " " + (dir / "out.safetensors") +
                              " 4 1 1e-5";
  ASSERT_EQ(std::system(command.c_str()), 0) << command;
  const at::Tensor reference = read_safetensors((dir / "out.safetensors")).tensors.at("logits");
  ASSERT_EQ(reference.sizes(), ours.sizes());
  EXPECT_LT((reference - ours).abs().max().item<double>(), 1e-5)
      << "ours " << ours << "\nreference " << reference;
  EXPECT_GT(ours.abs().max().item<double>(), 0.1);  // not trivially zero
}

TEST(RobertaTest, PaddingAndItsLengthChangeNoLogit) {
  const ModelConfig short_config = small_config(8), long_config = small_config(20);
  auto model = make_model(short_config);
  randomize(model, 3);
  auto longer = make_model(long_config);
  {
    torch::NoGradGuard no_grad;
    for (size_t i = 0; i < model->parameters().size(); ++i)
      longer->parameters()[i].copy_(model->parameters()[i]);
  }
  const auto [ids8, mask8] = padded_batch(8);
  const auto [ids20, mask20] = padded_batch(20);
  EXPECT_TRUE(
      torch::allclose(logits_of(model, ids8, mask8), logits_of(longer, ids20, mask20), 1e-5, 1e-5));
  // Without the mask the padding is attended to, and the logits move.
  EXPECT_FALSE(torch::allclose(logits_of(longer, ids20, mask20),
                               logits_of(longer, ids20, at::Tensor()), 1e-3, 1e-3));
}

TEST(RobertaTest, BlocksComposeToTheModelInTrainingModeToo) {
  auto model = make_model(small_config());
  randomize(model, 4);
  const auto [ids, mask] = padded_batch(12);
  const AttentionMaskScope scope(mask);
  model->train();
  torch::manual_seed(5);
  const at::Tensor whole = model->forward(ids);
  torch::manual_seed(5);
  at::Tensor x = ids;
  for (auto& block : *model)
    x = block.forward(x);
  EXPECT_TRUE(torch::equal(x, whole));
  const auto info = describe(model, sample_input(small_config(), 1));
  EXPECT_EQ(info.front().output_shape, (std::vector<int64_t>{12, 32}));
  EXPECT_EQ(info.back().output_shape, (std::vector<int64_t>{3}));
}

TEST(RobertaTest, WeightsReportMissingAndUnexpectedAndRefuseWrongShapes) {
  const TempDir dir;
  const std::string file = dir / "w.safetensors";
  const ModelConfig c = small_config();
  auto model = make_model(c);
  auto named = huggingface_named(model);
  named.erase("classifier.out_proj.weight");   // a checkpoint without the head
  named["lm_head.bias"] = torch::zeros({50});  // and with a masked-LM head
  write_safetensors(file, named);
  const WeightsReport report = load_weights(model, c, file);
  EXPECT_EQ(report.missing, (std::vector<std::string>{"classifier.out_proj.weight"}));
  EXPECT_EQ(report.unexpected, (std::vector<std::string>{"lm_head.bias"}));

  named["classifier.dense.weight"] = torch::zeros({32, 31});
  write_safetensors(file, named);
  try {
    load_weights(model, c, file);
    FAIL() << "a wrong shape loaded";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("classifier.dense.weight"), std::string::npos) << e.what();
  }
  write_safetensors(file, {{"unrelated", torch::zeros({2})}});
  EXPECT_THROW(load_weights(model, c, file), std::runtime_error);
}

// A RoBERTa client/server boundary: [B, 128, 768] activations of an encoder layer through the sort
// quantizer at 16/12/8/4 bits: shape kept, the expected ratios, error growing as bits fall.
TEST(RobertaTest, SortQuantizationOfEncoderActivations) {
  ModelConfig c = small_config(128);
  c.transformer.hidden = 768;
  c.transformer.heads = 12;
  c.transformer.layers = 1;
  c.transformer.max_positions = 514;
  auto model = make_model(c);
  const auto [ids, mask] = padded_batch(128);
  at::Tensor x;
  {
    torch::NoGradGuard no_grad;
    model->eval();
    const AttentionMaskScope scope(mask);
    x = model->begin()[1].forward(model->begin()[0].forward(ids));
  }
  ASSERT_EQ(x.sizes(), (std::vector<int64_t>{2, 128, 768}));
  double previous_error = 0;
  for (const int bits : {16, 12, 8, 4}) {
    const auto codec = compress::make_codec("sortquant:" + std::to_string(bits));
    const auto packet = compress::encode(*codec, x);
    const at::Tensor y = compress::decode(packet);
    ASSERT_EQ(y.sizes(), x.sizes());
    EXPECT_NEAR(compress::compression_ratio(packet.size(), x.numel()), bits / 32.0, 0.01) << bits;
    const double error = (y - x).pow(2).mean().item<double>() / x.var().item<double>();
    EXPECT_GT(error, previous_error) << bits;
    EXPECT_LT(error, bits >= 8 ? 1e-3 : 0.05) << bits;
    previous_error = error;
  }
}

TEST(RobertaTest, TokenIdsOutsideTheVocabularyAreAnError) {
  auto model = make_model(small_config());
  const at::Tensor ids = torch::full({1, 12}, 50, torch::kLong);
  EXPECT_THROW(logits_of(model, ids, at::Tensor()), c10::Error);
}

}  // namespace
}  // namespace dtrain::models
