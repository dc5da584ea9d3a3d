// A RoBERTa encoder through the pipeline against single-process training: token ids and
// padded attention masks, the U-shape f2l2 placement (two blocks at each end) and a linear
// chain, parameters compared after K SGD steps. The masks reach the server's layers through
// the pipeline; a wrong or missing mask changes the attention and fails the comparison.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <map>
#include <mutex>

#include "../support/pipeline_follower.h"
#include "../support/ranks.h"
#include "dtrain/comm/group.h"
#include "dtrain/compress/codec.h"
#include "dtrain/models/batch_context.h"
#include "dtrain/models/registry.h"
#include "dtrain/parallel/pipeline/pipeline.h"

namespace dtrain::parallel::pipeline {
namespace {

constexpr int kTextSteps = 3;
constexpr int64_t kTextBatch = 16, kLength = 12;

using ParamMap = std::map<std::string, at::Tensor>;

torch::nn::Sequential make_encoder() {
  models::ModelConfig c;
  c.name = "roberta";
  c.num_classes = 2;
  c.input_shape = {kLength};
  c.transformer.layers = 4;  // blocks: embeddings, layer0..3, classifier
  c.transformer.hidden = 32;
  c.transformer.heads = 4;
  c.transformer.vocab = 60;
  c.transformer.max_positions = 40;
  c.transformer.dropout = 0;  // deterministic: the two runs must agree
  torch::manual_seed(21);
  return models::make_model(c);
}

struct TextBatch {
  at::Tensor ids, labels, mask;
};

std::vector<TextBatch> text_batches() {
  at::Generator g = at::detail::createCPUGenerator(4);
  std::vector<TextBatch> out;
  for (int k = 0; k < kTextSteps; ++k) {
    const at::Tensor lengths = at::randint(3, kLength + 1, {kTextBatch, 1}, g);
    const at::Tensor mask = at::arange(kLength).view({1, kLength}).lt(lengths).to(at::kByte);
    const at::Tensor ids =
        at::where(mask.to(at::kBool), at::randint(3, 60, {kTextBatch, kLength}, g),
                  at::full({kTextBatch, kLength}, 1, at::kLong));
    out.push_back({ids, at::randint(0, 2, {kTextBatch}, g), mask});
  }
  return out;
}

ParamMap parameters_of(const torch::nn::Module& m) {
  ParamMap out;
  for (const auto& p : m.named_parameters())
    out[p.key()] = p.value().detach().clone();
  return out;
}

ParamMap reference() {
  auto model = make_encoder();
  torch::optim::SGD opt(model->parameters(), torch::optim::SGDOptions(0.1));
  for (const auto& b : text_batches()) {
    opt.zero_grad();
    const models::AttentionMaskScope scope(b.mask);
    torch::nn::functional::cross_entropy(model->forward(b.ids), b.labels).backward();
    opt.step();
  }
  return parameters_of(*model);
}

struct TextRun {
  ParamMap params;
  comm::LinkStats rank0_to_1;  // rank 0's counters of its link to rank 1, over the steps
};

TextRun run_pipeline(const Partition& partition, int ranks) {
  std::vector<torch::nn::Sequential> models;
  for (int r = 0; r < ranks; ++r)
    models.push_back(make_encoder());
  PipelineConfig config;
  config.partition = partition;
  config.schedule = "1f1b";
  config.micro_batches = 4;
  config.mask_length = kLength;
  TextRun run;
  std::mutex mu;
  testing::run_ranks(ranks, [&](comm::Group& g) {
    Pipeline p(g, models[static_cast<size_t>(g.rank())], config);
    g.reset_link_stats();
    torch::optim::SGD opt(p.parameters(), torch::optim::SGDOptions(0.1));
    if (p.is_driver()) {
      for (const auto& b : text_batches()) {
        opt.zero_grad();
        EXPECT_EQ(p.train_batch(b.ids, b.labels, b.mask, 0.1).samples, kTextBatch);
        opt.step();
      }
      run.rank0_to_1 = g.link_stats(1);
      EXPECT_THROW(p.eval_batch(text_batches()[0].ids, text_batches()[0].labels, {}),
                   std::invalid_argument);  // a text batch without its mask
      p.stop();
    } else {
      testing::follow(p, opt);
    }
    std::lock_guard<std::mutex> lock(mu);
    for (const auto& stage : p.stage_modules())
      for (const auto& [k, v] : parameters_of(*stage))
        run.params[k] = v;
  });
  return run;
}

void expect_equal(const ParamMap& got, const ParamMap& want) {
  ASSERT_EQ(got.size(), want.size());
  for (const auto& [name, w] : want)
    EXPECT_LT((got.at(name) - w).abs().max().item<double>(), 1e-5) << name;
}

TEST(PipelineTextTest, UShapeF2L2EqualsSingleProcess) {
  const Partition p = make_partition(Placement::kUShape, 2, 6, {2}, {}, 2, 2);
  const TextRun run = run_pipeline(p, 2);
  expect_equal(run.params, reference());
  // Rank 0 sends per step a command and, per micro-batch, layer0's activations, the
  // attention mask and (backward) the gradient of layer2's output: no token ids, no labels. Only
  // the boundary's first activation carries a 16-byte [length, CRC32C] first. (The wire
  // check's 8-byte check messages are not counted: link bytes are payload bytes.)
  const int64_t micro = kTextBatch / 4;
  const auto boundary = static_cast<int64_t>(
      compress::encode(*compress::make_codec("none"), at::zeros({micro, kLength, 32})).size());
  const int64_t per_step = kCommandValues * 8 + 4 * (boundary + micro * kLength) + 4 * boundary;
  EXPECT_EQ(run.rank0_to_1.send.bytes, kTextSteps * per_step + 16);
}

TEST(PipelineTextTest, LinearChainOfThreeEqualsSingleProcess) {
  const Partition p = make_partition(Placement::kLinear, 3, 6, {2, 2, 2}, {});
  expect_equal(run_pipeline(p, 3).params, reference());
}

}  // namespace
}  // namespace dtrain::parallel::pipeline
