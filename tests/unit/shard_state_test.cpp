// A checkpoint shard's contents (train/shard_state.h): every part of the state round-trips
// exactly, for each optimizer, and a shard that does not fit is refused before anything
// changes, naming the tensor.
#include <gtest/gtest.h>
#include <torch/nn/modules/batchnorm.h>
#include <torch/nn/modules/linear.h>
#include <torch/optim/adam.h>
#include <torch/optim/adamw.h>
#include <torch/optim/sgd.h>
#include <torch/torch.h>

#include "dtrain/models/safetensors.h"
#include "dtrain/train/shard_state.h"

namespace dtrain::train {
namespace {

torch::nn::Sequential small_model() {
  return torch::nn::Sequential(torch::nn::Linear(3, 4), torch::nn::BatchNorm1d(4),
                               torch::nn::Linear(4, 2));
}

std::unique_ptr<torch::optim::Optimizer> optimizer_for(const std::string& kind,
                                                       torch::nn::Sequential& m) {
  if (kind == "sgd")
    return std::make_unique<torch::optim::SGD>(m->parameters(),
                                               torch::optim::SGDOptions(0.1).momentum(0.9));
  if (kind == "adam")
    return std::make_unique<torch::optim::Adam>(m->parameters(),
                                                torch::optim::AdamOptions(0.01).amsgrad(true));
  return std::make_unique<torch::optim::AdamW>(m->parameters(), torch::optim::AdamWOptions(0.01));
}

// Two optimizer steps and an odd learning rate: every state field is non-trivial.
void train_a_little(torch::nn::Sequential& m, torch::optim::Optimizer& o) {
  for (int step = 0; step < 2; ++step) {
    o.zero_grad();
    m->forward(torch::randn({5, 3})).square().sum().backward();
    o.step();
  }
  for (auto& g : o.param_groups())
    g.options().set_lr(0.0375);
}

void expect_same_tensors(const ShardContents& a, const ShardContents& b) {
  ASSERT_EQ(a.tensors.size(), b.tensors.size());
  for (const auto& [name, t] : a.tensors) {
    ASSERT_TRUE(b.tensors.count(name)) << name;
    EXPECT_TRUE(torch::equal(t, b.tensors.at(name))) << name;
  }
  EXPECT_EQ(a.metadata, b.metadata);
}

TEST(ShardStateTest, EveryOptimizerRoundTripsThroughSafetensorsBytes) {
  for (const std::string kind : {"sgd", "adam", "adamw"}) {
    SCOPED_TRACE(kind);
    torch::manual_seed(1);
    auto model = small_model();
    auto optimizer = optimizer_for(kind, model);
    train_a_little(model, *optimizer);
    const Position at{3, 7, 1.25, 40, 56};
    const ShardContents saved = shard_contents(at, {model, *optimizer});
    EXPECT_EQ(saved.metadata.at("optimizer"), kind);
    const std::string bytes = models::safetensors_bytes(saved.tensors, saved.metadata);
    const at::Tensor rng_then = at::detail::getDefaultCPUGenerator().get_state();
    const uint32_t fingerprint = state_crc32c(at, {model, *optimizer});

    torch::manual_seed(2);  // another model, optimizer and generator state
    auto fresh = small_model();
    auto fresh_optimizer = optimizer_for(kind, fresh);
    const auto file = models::parse_safetensors(bytes.data(), bytes.size(), "shard");
    const Position back =
        restore_shard_contents({file.tensors, file.metadata}, {fresh, *fresh_optimizer}, "shard");
    EXPECT_EQ(back.epoch, 3);
    EXPECT_EQ(back.step, 7);
    EXPECT_EQ(back.loss_sum, 1.25);
    EXPECT_EQ(back.correct, 40);
    EXPECT_EQ(back.seen, 56);
    EXPECT_TRUE(torch::equal(at::detail::getDefaultCPUGenerator().get_state(), rng_then));
    expect_same_tensors(saved, shard_contents(back, {fresh, *fresh_optimizer}));
    EXPECT_EQ(state_crc32c(back, {fresh, *fresh_optimizer}), fingerprint);
    // The restored optimizer continues exactly as the saved one does.
    const auto x = torch::randn({5, 3});
    const auto step = [&x](torch::nn::Sequential& m, torch::optim::Optimizer& o) {
      o.zero_grad();
      m->forward(x).square().sum().backward();
      o.step();
    };
    step(model, *optimizer);
    step(fresh, *fresh_optimizer);
    const auto p = model->parameters(), q = fresh->parameters();
    for (size_t i = 0; i < p.size(); ++i)
      EXPECT_TRUE(torch::equal(p[i], q[i])) << "parameter " << i;
  }
}

std::string error_restoring(const ShardContents& contents, torch::nn::Sequential& model,
                            torch::optim::Optimizer& optimizer) {
  try {
    restore_shard_contents(contents, {model, optimizer}, "s.safetensors");
  } catch (const std::runtime_error& e) {
    return e.what();
  }
  return "";
}

TEST(ShardStateTest, AShardThatDoesNotFitIsRefusedBeforeAnythingChanges) {
  torch::manual_seed(3);
  auto model = small_model();
  auto optimizer = optimizer_for("sgd", model);
  train_a_little(model, *optimizer);
  const ShardContents good = shard_contents({1, 0, 0, 0, 0}, {model, *optimizer});

  auto target = small_model();
  auto target_optimizer = optimizer_for("sgd", target);
  const auto before = shard_contents({0, 0, 0, 0, 0}, {target, *target_optimizer});
  const auto refused = [&](ShardContents bad, const std::string& says) {
    const std::string error = error_restoring(bad, target, *target_optimizer);
    EXPECT_NE(error.find(says), std::string::npos) << error;
    EXPECT_NE(error.find("s.safetensors"), std::string::npos) << error;
    expect_same_tensors(before, shard_contents({0, 0, 0, 0, 0}, {target, *target_optimizer}));
  };
  ShardContents c = good;
  c.tensors["model/2.weight"] = torch::zeros({2, 5});
  refused(c, "tensor 'model/2.weight' is Float [2,5], this run needs Float [2,4]");
  c = good;
  c.tensors.erase("model/1.running_mean");
  refused(c, "has no tensor 'model/1.running_mean'");
  c = good;
  c.tensors["model/3.weight"] = torch::zeros({1});
  refused(c, "holds tensor 'model/3.weight', which this run does not have");
  c = good;
  c.metadata["optimizer"] = "adam";
  refused(c, "holds the state of optimizer 'adam', this run uses sgd");
  c = good;
  c.tensors["position"] = torch::tensor({1.0, 0.5, 0.0, 0.0, 0.0}, at::kDouble);
  refused(c, "impossible position (step 0.5");
  c = good;
  c.tensors["optimizer/0/momentum_buffer"] = torch::zeros({4, 3}, at::kDouble);
  refused(c, "'optimizer/0/momentum_buffer' is Double");
}

}  // namespace
}  // namespace dtrain::train
