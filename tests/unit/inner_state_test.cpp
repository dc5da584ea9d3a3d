// The inner optimizer's state as one vector (train/inner_state.h): packed from one optimizer
// and unpacked into a fresh one over the same values, the next steps of both are bit for bit
// the same (Adam's first moments, not carried, at zero in both); a state of zeros is a fresh
// optimizer's; a vector of another size is an error.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <stdexcept>
#include <vector>

#include "dtrain/train/inner_state.h"
#include "dtrain/train/optimizer.h"

namespace dtrain {
namespace {

struct Twin {
  torch::nn::Linear model{nullptr};
  std::unique_ptr<torch::optim::Optimizer> optimizer;
};

Twin make_twin(const train::OptimConfig& config, const torch::nn::Linear& like) {
  Twin t;
  t.model = torch::nn::Linear(torch::nn::LinearOptions(5, 3));
  {
    torch::NoGradGuard no_grad;
    t.model->weight.copy_(like->weight);
    t.model->bias.copy_(like->bias);
  }
  t.optimizer = train::make_optimizer(config, t.model->parameters());
  return t;
}

void step(Twin& t, int seed) {
  torch::manual_seed(seed);
  const torch::Tensor x = torch::randn({4, 5}), y = torch::randn({4, 3});
  t.optimizer->zero_grad();
  torch::mse_loss(t.model(x), y).backward();
  t.optimizer->step();
}

void zero_first_moments(torch::optim::Optimizer& optimizer) {
  for (auto& [key, state] : optimizer.state()) {
    if (auto* w = dynamic_cast<torch::optim::AdamWParamState*>(state.get())) w->exp_avg().zero_();
    if (auto* a = dynamic_cast<torch::optim::AdamParamState*>(state.get())) a->exp_avg().zero_();
  }
}

train::OptimConfig config(train::OptimizerKind kind, double momentum) {
  train::OptimConfig c;
  c.kind = kind;
  c.lr = 1e-2;
  c.momentum = momentum;
  return c;
}

TEST(InnerStateTest, AStateTakenOverStepsOnAsItsOwnerDoes) {
  for (const auto& c :
       {config(train::OptimizerKind::kAdamW, 0.9), config(train::OptimizerKind::kAdam, 0.9),
        config(train::OptimizerKind::kSgd, 0.9)}) {
    torch::manual_seed(1);
    const torch::nn::Linear init(torch::nn::LinearOptions(5, 3));
    Twin owner = make_twin(c, init);
    for (int s = 0; s < 3; ++s)
      step(owner, s);
    Twin taker = make_twin(c, owner.model);
    const at::Tensor packed = train::pack_inner_state(*owner.optimizer);
    ASSERT_EQ(packed.numel(), train::inner_state_values(*taker.optimizer));
    train::unpack_inner_state(*taker.optimizer, packed);
    EXPECT_TRUE(torch::equal(train::pack_inner_state(*taker.optimizer), packed));
    EXPECT_EQ(train::inner_state_steps(*taker.optimizer),
              c.kind == train::OptimizerKind::kSgd ? 0 : 3);
    if (c.kind != train::OptimizerKind::kSgd) zero_first_moments(*owner.optimizer);
    step(owner, 7);
    step(taker, 7);
    EXPECT_TRUE(torch::equal(owner.model->weight, taker.model->weight)) << to_string(c.kind);
    EXPECT_TRUE(torch::equal(owner.model->bias, taker.model->bias)) << to_string(c.kind);
    // Without the state the same step lands elsewhere: the test can tell.
    Twin fresh = make_twin(c, init);
    for (int s = 0; s < 3; ++s)
      step(fresh, s);
    fresh.optimizer = train::make_optimizer(c, fresh.model->parameters());
    step(fresh, 7);
    EXPECT_FALSE(torch::equal(owner.model->weight, fresh.model->weight)) << to_string(c.kind);
  }
}

TEST(InnerStateTest, ZerosAreAFreshOptimizersStateAndAnotherSizeIsAnError) {
  for (const auto& c :
       {config(train::OptimizerKind::kAdamW, 0.9), config(train::OptimizerKind::kSgd, 0.9)}) {
    torch::manual_seed(2);
    const torch::nn::Linear init(torch::nn::LinearOptions(5, 3));
    Twin fresh = make_twin(c, init), reset = make_twin(c, init);
    EXPECT_TRUE(torch::equal(train::pack_inner_state(*fresh.optimizer),
                             at::zeros({train::inner_state_values(*fresh.optimizer)})));
    step(reset, 0);
    train::unpack_inner_state(*reset.optimizer, train::pack_inner_state(*fresh.optimizer));
    {
      torch::NoGradGuard no_grad;
      reset.model->weight.copy_(init->weight);
      reset.model->bias.copy_(init->bias);
    }
    step(fresh, 5);
    step(reset, 5);
    EXPECT_TRUE(torch::equal(fresh.model->weight, reset.model->weight)) << to_string(c.kind);
    const int64_t n = train::inner_state_values(*fresh.optimizer);
    EXPECT_THROW(train::unpack_inner_state(*fresh.optimizer, at::zeros({n + 1})),
                 std::invalid_argument);
    EXPECT_THROW(train::unpack_inner_state(*fresh.optimizer, at::zeros({n}, at::kDouble)),
                 std::invalid_argument);
  }
  // Plain SGD keeps no state: nothing to carry.
  torch::manual_seed(3);
  const torch::nn::Linear init(torch::nn::LinearOptions(5, 3));
  Twin plain = make_twin(config(train::OptimizerKind::kSgd, 0), init);
  EXPECT_EQ(train::inner_state_values(*plain.optimizer), 0);
  step(plain, 0);
  EXPECT_EQ(train::pack_inner_state(*plain.optimizer).numel(), 0);
}

}  // namespace
}  // namespace dtrain
