// The training loop: learning rates, resume (at epoch ends and inside epochs) equals an
// uninterrupted run, damaged checkpoints are clear errors, determinism.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cstdio>
#include <fstream>

#include "dtrain/models/registry.h"
#include "dtrain/train/checkpoint.h"
#include "dtrain/train/trainer.h"

namespace dtrain::train {
namespace {

TrainConfig small_run(const std::string& checkpoint_dir) {
  TrainConfig c;
  c.model.name = "mlp";
  c.model.width = 0.1;
  c.data.name = "synthetic";
  c.data.input_shape = {1, 6, 6};
  c.data.num_classes = 4;
  c.data.synthetic_size = 300;
  c.epochs = 4;
  c.batch_size = 32;
  c.optim.lr = 0.1;
  c.optim.schedule = LrSchedule::kCosine;
  c.optim.warmup_epochs = 1;
  c.seed = 3;
  c.checkpoint_dir = checkpoint_dir;
  c.progress = false;
  return c;
}

std::vector<torch::Tensor> final_parameters(const TrainConfig& c) {
  models::ModelConfig mc = c.model;
  mc.input_shape = c.data.input_shape;
  mc.in_channels = mc.input_shape[0];
  mc.num_classes = c.data.num_classes;
  auto model = models::make_model(mc);
  torch::optim::SGD opt(model->parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
  load_checkpoint(c.checkpoint_dir, 0, {model, opt});
  std::vector<torch::Tensor> out;
  for (const auto& p : model->parameters())
    out.push_back(p.detach().clone());
  return out;
}

std::string temp_dir() {
  char templ[] = "/tmp/dtrain-ckpt-XXXXXX";
  return mkdtemp(templ);
}

TEST(LearningRateTest, WarmupThenSchedule) {
  OptimConfig o;
  o.lr = 1.0;
  o.schedule = LrSchedule::kCosine;
  o.warmup_epochs = 2;
  EXPECT_NEAR(learning_rate(o, 1.0, 10), 0.5, 1e-6);
  EXPECT_NEAR(learning_rate(o, 2.0, 10), 1.0, 1e-6);
  EXPECT_NEAR(learning_rate(o, 6.0, 10), 0.5, 1e-6);
  EXPECT_NEAR(learning_rate(o, 10.0, 10), 0.0, 1e-6);
  o.schedule = LrSchedule::kStep;
  o.warmup_epochs = 0;
  o.step_size = 3;
  o.gamma = 0.1;
  EXPECT_NEAR(learning_rate(o, 2.9, 10), 1.0, 1e-9);
  EXPECT_NEAR(learning_rate(o, 3.0, 10), 0.1, 1e-9);
  o.schedule = LrSchedule::kConstant;
  EXPECT_EQ(learning_rate(o, 7.0, 10), 1.0);
}

TEST(ResumeTest, InterruptedAndResumedEqualsUninterrupted) {
  const TrainConfig whole = small_run(temp_dir());
  const auto history = train(whole);
  ASSERT_EQ(history.size(), 4u);
  EXPECT_LT(history.back().train_loss, history.front().train_loss);

  TrainConfig part = small_run(temp_dir());
  part.stop_after = 2;
  train(part);  // stops after epoch 2, as a crash would: the checkpoint holds epoch 2
  part.stop_after = 0;
  part.resume = true;
  const auto resumed = train(part);
  ASSERT_EQ(resumed.size(), 2u);
  EXPECT_EQ(resumed.front().epoch, 3);

  const auto a = final_parameters(whole), b = final_parameters(part);
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i)
    EXPECT_TRUE(torch::equal(a[i], b[i])) << "parameter " << i;
  EXPECT_DOUBLE_EQ(resumed.back().test_loss, history.back().test_loss);
}

// Stopped inside epoch 2 (after its optimizer step 9 of 10; a checkpoint every 4 steps, the
// last after step 8, 16 batches in) and resumed: the same parameters and the same epoch
// statistics as an uninterrupted run, with gradient accumulation (steps of 2 batches).
TEST(ResumeTest, MidEpochCheckpointsResumeExactly) {
  TrainConfig whole = small_run(temp_dir());
  whole.epochs = 2;
  whole.batch_size = 16;  // 19 batches an epoch
  whole.grad_accum_steps = 2;
  const auto history = train(whole);

  TrainConfig part = whole;
  part.checkpoint_dir = temp_dir();
  part.checkpoint_every = 4;
  part.stop_after_steps = 19;
  EXPECT_EQ(train(part).size(), 1u);  // epoch 1 whole, epoch 2 stopped
  const auto text = read_manifest_text(part.checkpoint_dir);
  ASSERT_TRUE(text.has_value());
  const Manifest m = Manifest::parse(*text, "test");
  EXPECT_EQ(m.epoch, 1);
  EXPECT_EQ(m.step, 16);
  ASSERT_EQ(m.shards.size(), 1u);
  EXPECT_EQ(m.shards[0].file, "shard-r0-e1-s16.safetensors");

  part.stop_after_steps = 0;
  part.resume = true;
  const auto resumed = train(part);
  ASSERT_EQ(resumed.size(), 1u);
  EXPECT_EQ(resumed[0].epoch, 2);
  EXPECT_EQ(resumed[0].train_loss, history[1].train_loss);
  EXPECT_EQ(resumed[0].train_acc, history[1].train_acc);
  EXPECT_EQ(resumed[0].test_loss, history[1].test_loss);
  const auto a = final_parameters(whole), b = final_parameters(part);
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i)
    EXPECT_TRUE(torch::equal(a[i], b[i])) << "parameter " << i;
  // The manifests' state fingerprints say the same (optimizer state and generator too).
  const auto whole_end = Manifest::parse(*read_manifest_text(whole.checkpoint_dir), "whole");
  const auto part_end = Manifest::parse(*read_manifest_text(part.checkpoint_dir), "part");
  EXPECT_EQ(whole_end.shards[0].state_crc32c, part_end.shards[0].state_crc32c);
  EXPECT_NE(m.shards[0].state_crc32c, part_end.shards[0].state_crc32c);
}

void flip_byte(const std::string& path, long offset) {
  FILE* f = std::fopen(path.c_str(), "r+b");
  ASSERT_NE(f, nullptr) << path;
  std::fseek(f, offset, SEEK_SET);
  const int c = std::fgetc(f);
  std::fseek(f, offset, SEEK_SET);
  std::fputc(c ^ 0x01, f);
  std::fclose(f);
}

std::string error_of(const TrainConfig& c) {
  try {
    train(c);
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

// A corrupt or missing shard and a corrupt manifest are errors naming the file; another
// model is refused with the reason.
TEST(ResumeTest, DamagedCheckpointsAreClearErrors) {
  TrainConfig c = small_run(temp_dir());
  c.epochs = 1;
  train(c);
  c.resume = true;
  const std::string shard = c.checkpoint_dir + "/shard-r0-e1-s0.safetensors";
  flip_byte(shard, 100);
  EXPECT_NE(error_of(c).find("checkpoint shard " + shard + " is corrupt"), std::string::npos)
      << error_of(c);
  flip_byte(shard, 100);  // repaired
  TrainConfig other = c;
  other.model.depth = c.model.depth + 1;
  EXPECT_NE(error_of(other).find("resume with the same model"), std::string::npos)
      << error_of(other);
  std::remove(shard.c_str());
  EXPECT_NE(error_of(c).find(shard + " (rank 0) is missing"), std::string::npos) << error_of(c);
  flip_byte(manifest_path(c.checkpoint_dir), 3);
  EXPECT_NE(error_of(c).find("corrupt checkpoint manifest"), std::string::npos) << error_of(c);
}

TEST(DeterminismTest, SameSeedSameRunOtherSeedOtherRun) {
  TrainConfig c = small_run("");
  c.epochs = 2;
  const auto a = train(c), b = train(c);
  EXPECT_EQ(a.back().train_loss, b.back().train_loss);
  c.seed = 4;
  EXPECT_NE(train(c).back().train_loss, a.back().train_loss);
}

// The step log: a row every --log-every batches and at each epoch's end, each the mean over
// the batches since the previous row; together the rows cover every training sample once,
// so their sample-weighted losses give the epoch's (rank 0 alone holds all here).
TEST(StepLogTest, RowsEveryNBatchesCoverTheEpochAndAddUpToItsLoss) {
  TrainConfig c = small_run("");
  c.epochs = 2;
  c.log_every = 3;
  const std::string path = temp_dir() + "/steps.jsonl";
  c.step_log_path = path;
  const auto history = train(c);
  const int64_t batches = (300 + 31) / 32;  // 10, the last one of 12 samples
  ASSERT_EQ(history.size(), 2u);
  int64_t previous_step = 0;
  double previous_elapsed = 0;
  for (size_t e = 0; e < history.size(); ++e) {
    const auto& steps = history[e].steps;
    ASSERT_EQ(steps.size(), 4u) << "batches 3, 6, 9 and the epoch's end";
    double loss_sum = 0;
    for (size_t i = 0; i < steps.size(); ++i) {
      const auto& row = steps[i];
      const int64_t step = row["step"].get<int64_t>();
      EXPECT_EQ(step, static_cast<int64_t>(e) * batches +
                          (i + 1 < steps.size() ? 3 * static_cast<int64_t>(i + 1) : batches));
      EXPECT_GT(step, previous_step);
      EXPECT_GE(row["elapsed_s"].get<double>(), previous_elapsed);
      EXPECT_GT(row["samples_per_s"].get<double>(), 0);
      const int64_t from = step - (previous_step > static_cast<int64_t>(e) * batches
                                       ? previous_step
                                       : static_cast<int64_t>(e) * batches);
      const int64_t last_batch = static_cast<int64_t>(e + 1) * batches;
      const int64_t samples = 32 * from - (step == last_batch ? 32 - 12 : 0);
      loss_sum += row["train_loss"].get<double>() * static_cast<double>(samples);
      previous_step = step;
      previous_elapsed = row["elapsed_s"].get<double>();
    }
    EXPECT_NEAR(loss_sum / 300, history[e].train_loss, 1e-9 * history[e].train_loss);
  }
  // The same rows in the file, with the command line that produced them.
  std::ifstream in(path);
  std::string line;
  int lines = 0;
  while (std::getline(in, line))
    ++lines;
  EXPECT_EQ(lines, 8);
  std::remove(path.c_str());
}

TEST(TrainConfigTest, BadValuesAreRejected) {
  TrainConfig c = small_run("");
  c.epochs = 0;
  EXPECT_THROW(train(c), std::invalid_argument);
  EXPECT_THROW(parse_lr_schedule("exponential"), std::invalid_argument);
  EXPECT_EQ(parse_lr_schedule(to_string(LrSchedule::kStep)), LrSchedule::kStep);
  c = small_run("");
  c.parallel.mode = ParallelMode::kDdp;  // without a process group
  EXPECT_THROW(train(c), std::invalid_argument);
  c = small_run("");
  c.checkpoint_dir.clear();
  c.resume = true;
  EXPECT_THROW(train(c), std::invalid_argument);
  c = small_run("");
  c.checkpoint_every = 5;  // without --checkpoint-dir
  EXPECT_THROW(train(c), std::invalid_argument);
  c = small_run("");
  c.model.name = "roberta";  // reads tokens, not images
  EXPECT_THROW(train(c), std::invalid_argument);
}

TEST(LearningRateTest, LinearWarmsUpThenDecaysToZero) {
  OptimConfig o;
  o.lr = 2e-5;
  o.schedule = LrSchedule::kLinear;
  o.warmup_epochs = 1;
  EXPECT_NEAR(learning_rate(o, 0.5, 5), 1e-5, 1e-12);
  EXPECT_NEAR(learning_rate(o, 1.0, 5), 2e-5, 1e-12);
  EXPECT_NEAR(learning_rate(o, 3.0, 5), 1e-5, 1e-12);
  EXPECT_NEAR(learning_rate(o, 5.0, 5), 0.0, 1e-12);
}

}  // namespace
}  // namespace dtrain::train
