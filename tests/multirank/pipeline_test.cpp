// The pipeline runtime against single-process training: same initial model, same
// mini-batches, parameters compared after K optimizer steps. Ranks are threads over real
// Gloo/TCP on loopback.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <map>
#include <mutex>

#include "../support/models.h"
#include "../support/pipeline_follower.h"
#include "../support/ranks.h"
#include "dtrain/comm/group.h"
#include "dtrain/compress/codec.h"
#include "dtrain/models/layers.h"
#include "dtrain/models/registry.h"
#include "dtrain/parallel/pipeline/pipeline.h"

namespace dtrain::parallel::pipeline {
namespace {

constexpr int kSteps = 3;
constexpr int64_t kBatch = 64;

using ParamMap = std::map<std::string, at::Tensor>;
using ModelFactory = std::function<torch::nn::Sequential()>;

torch::nn::Sequential make_mlp(int64_t depth) {
  return testing::tiny_mlp(7, depth);
}

// Linear -> BatchNorm -> ReLU blocks: the micro-batch statistics semantics.
torch::nn::Sequential make_bn_model() {
  torch::manual_seed(11);
  torch::nn::Sequential m;
  m->push_back("flatten", torch::nn::Flatten());
  for (int i = 0; i < 3; ++i) {
    m->push_back("bn" + std::to_string(i),
                 models::Stack(torch::nn::Linear(i == 0 ? 36 : 24, 24), torch::nn::BatchNorm1d(24),
                               torch::nn::ReLU()));
  }
  m->push_back("head", torch::nn::Linear(24, 5));
  return m;
}

std::vector<std::pair<at::Tensor, at::Tensor>> batches() {
  at::Generator g = at::detail::createCPUGenerator(3);
  std::vector<std::pair<at::Tensor, at::Tensor>> out;
  for (int k = 0; k < kSteps; ++k)
    out.emplace_back(at::randn({kBatch, 1, 6, 6}, g), at::randint(0, 5, {kBatch}, g));
  return out;
}

torch::optim::SGD make_sgd(const std::vector<at::Tensor>& params) {
  return torch::optim::SGD(params, torch::optim::SGDOptions(0.1).momentum(0.9));
}

ParamMap state_of(const torch::nn::Module& m) {
  ParamMap out;
  for (const auto& p : m.named_parameters())
    out[p.key()] = p.value().detach().clone();
  for (const auto& b : m.named_buffers())
    out[b.key()] = b.value().detach().clone();
  return out;
}

// Single process: the whole batch at once, or (micro > 0) the micro-batches one after the
// other with accumulated gradients, as the pipeline's BatchNorm semantics promise.
ParamMap reference(const ModelFactory& factory, int micro) {
  auto model = factory();
  auto opt = make_sgd(model->parameters());
  for (const auto& [x, y] : batches()) {
    opt.zero_grad();
    if (micro == 0) {
      torch::nn::functional::cross_entropy(model->forward(x), y).backward();
    } else {
      for (const auto& [xs, ys] : [&] {
             std::vector<std::pair<at::Tensor, at::Tensor>> parts;
             const auto xc = x.tensor_split(micro), yc = y.tensor_split(micro);
             for (size_t i = 0; i < xc.size(); ++i)
               parts.emplace_back(xc[i], yc[i]);
             return parts;
           }()) {
        (torch::nn::functional::cross_entropy(
             model->forward(xs), ys,
             torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kSum)) /
         static_cast<double>(kBatch))
            .backward();
      }
    }
    opt.step();
  }
  return state_of(*model);
}

struct PipelineRun {
  std::map<int, ParamMap> states;          // per rank, keys as in the whole model
  std::vector<RankReport> reports;         // collected by rank 0 after the steps
  std::map<int, comm::LinkStats> to_peer;  // rank 0's Group counters per peer
  double final_loss = 0;
};

PipelineRun run_pipeline(const ModelFactory& factory, PipelineConfig config, int ranks) {
  std::vector<torch::nn::Sequential> models;
  for (int r = 0; r < ranks; ++r)
    models.push_back(factory());  // built here: the global generator is not thread-safe
  PipelineRun run;
  std::mutex mu;
  testing::run_ranks(ranks, [&](comm::Group& g) {
    Pipeline p(g, models[static_cast<size_t>(g.rank())], config);
    g.reset_link_stats();
    auto opt = make_sgd(p.parameters());
    if (p.is_driver()) {
      for (const auto& [x, y] : batches()) {
        opt.zero_grad();
        const StepResult r = p.train_batch(x, y, {}, 0.1);
        EXPECT_EQ(r.samples, kBatch);
        run.final_loss = r.loss_sum / kBatch;
        opt.step();
      }
      for (int peer = 1; peer < g.size(); ++peer)
        run.to_peer[peer] = g.link_stats(peer);
      run.reports = p.collect_reports();
      p.stop();
    } else {
      testing::follow(p, opt);
    }
    ParamMap mine;
    for (const auto& stage : p.stage_modules())
      for (const auto& [k, v] : state_of(*stage))
        mine[k] = v;
    std::lock_guard<std::mutex> lock(mu);
    run.states[g.rank()] = std::move(mine);
  });
  return run;
}

void expect_matches(const PipelineRun& run, const ParamMap& ref) {
  size_t seen = 0;
  for (const auto& [rank, state] : run.states) {
    for (const auto& [key, value] : state) {
      ASSERT_TRUE(ref.count(key)) << key;
      const double diff = (value - ref.at(key)).abs().max().item<double>();
      EXPECT_LE(diff, 1e-5) << "rank " << rank << " " << key;
      ++seen;
    }
  }
  EXPECT_EQ(seen, ref.size()) << "every parameter and buffer lives on exactly one rank";
}

PipelineConfig config_for(Placement placement, std::string kind, int ranks, int chunks,
                          int64_t blocks) {
  PipelineConfig c;
  c.partition = make_partition(placement, ranks, blocks, {}, {});
  c.schedule = kind;
  c.micro_batches = chunks;
  return c;
}

struct Case {
  Placement placement;
  std::string kind;
  int ranks, chunks;
};

void PrintTo(const Case& c, std::ostream* out) {
  *out << to_string(c.placement) << " " << c.kind << " S=" << c.ranks << " M=" << c.chunks;
}

class PipelineEquivalence : public ::testing::TestWithParam<Case> {};

TEST_P(PipelineEquivalence, EqualsSingleProcessTraining) {
  const Case c = GetParam();
  const int64_t depth = 6;  // 7 blocks: fc1..fc6, head
  const ModelFactory factory = [&] { return make_mlp(depth); };
  const PipelineRun run =
      run_pipeline(factory, config_for(c.placement, c.kind, c.ranks, c.chunks, depth + 1), c.ranks);
  expect_matches(run, reference(factory, 0));
}

INSTANTIATE_TEST_SUITE_P(Shapes, PipelineEquivalence,
                         ::testing::Values(Case{Placement::kLinear, "gpipe", 2, 64},
                                           Case{Placement::kLinear, "1f1b", 2, 5},
                                           Case{Placement::kLinear, "gpipe", 3, 1},
                                           Case{Placement::kLinear, "1f1b", 4, 32},
                                           Case{Placement::kLinear, "gpipe", 4, 7},
                                           Case{Placement::kUShape, "gpipe", 2, 4},
                                           Case{Placement::kUShape, "1f1b", 2, 64},
                                           Case{Placement::kUShape, "gpipe", 3, 1},
                                           Case{Placement::kUShape, "1f1b", 4, 32},
                                           Case{Placement::kUShape, "gpipe", 5, 3}),
                         [](const auto& info) {
                           const Case& c = info.param;
                           return to_string(c.placement) + "_" + c.kind + "_S" +
                                  std::to_string(c.ranks) + "_M" + std::to_string(c.chunks);
                         });

TEST(Pipeline, BatchNormUsesMicroBatchStatistics) {
  for (const std::string kind : {"gpipe", "1f1b"}) {
    const PipelineRun run =
        run_pipeline(make_bn_model, config_for(Placement::kUShape, kind, 3, 4, 5), 3);
    expect_matches(run, reference(make_bn_model, 4));
  }
}

int64_t packet_bytes(const std::string& codec, std::vector<int64_t> shape) {
  return static_cast<int64_t>(
      compress::encode(*compress::make_codec(codec), at::zeros(shape)).size());
}

TEST(Pipeline, UShapeSendsOnlyCompressedActivationsAndGradients) {
  // Rank 0 -> rank 1 carries, per step, the command and per micro-batch one activation
  // packet (fc1's output) and one gradient packet (for the server's output), each one
  // message; nothing else: no inputs, no labels. Only the first activation on each boundary
  // is preceded by a 16-byte [length, CRC32C] (it teaches the receiver the per-sample shape).
  PipelineConfig c = config_for(Placement::kUShape, "gpipe", 2, 4, 4);
  c.codecs.activations = compress::parse_codec("sortquant:8");
  c.codecs.gradients = compress::parse_codec("uniform:4");
  const PipelineRun run = run_pipeline([] { return make_mlp(3); }, c, 2);
  const int64_t micro = kBatch / 4, hidden = 32;
  const int64_t per_step = kCommandValues * 8 + 4 * packet_bytes("sortquant:8", {micro, hidden}) +
                           4 * packet_bytes("uniform:4", {micro, hidden});
  EXPECT_EQ(run.to_peer.at(1).send.bytes, kSteps * per_step + 16);
  const int64_t back = 4 * packet_bytes("sortquant:8", {micro, hidden}) +
                       4 * packet_bytes("uniform:4", {micro, hidden});
  EXPECT_EQ(run.to_peer.at(1).recv.bytes, kSteps * back + 16);
  EXPECT_TRUE(std::isfinite(run.final_loss));
}

double link_ratio(const PipelineRun& run, int src, int dst, const std::string& direction) {
  for (const auto& r : run.reports)
    for (const auto& l : r.links)
      if (l.src == src && l.dst == dst && l.direction == direction)
        return static_cast<double>(l.bytes) / static_cast<double>(l.fp32_bytes);
  ADD_FAILURE() << "no link " << src << "->" << dst << " " << direction;
  return 0;
}

TEST(Pipeline, CompressionOnlyOnTheChosenEdges) {
  for (bool all : {false, true}) {
    PipelineConfig c = config_for(Placement::kLinear, "1f1b", 3, 4, 4);
    c.codecs.activations = compress::parse_codec("uniform:8");
    c.codecs.gradients = compress::parse_codec("fp16");
    c.codecs.all_edges = all;
    const PipelineRun run = run_pipeline([] { return make_mlp(3); }, c, 3);
    SCOPED_TRACE(all ? "all edges" : "client edges");
    // Every boundary of this mlp carries [16, 32] per micro-batch.
    const auto ratio = [](const std::string& codec) {
      return static_cast<double>(packet_bytes(codec, {16, 32})) / (4.0 * 16 * 32);
    };
    EXPECT_LT(ratio("uniform:8"), 0.3);
    EXPECT_DOUBLE_EQ(link_ratio(run, 0, 1, "forward"), ratio("uniform:8"));
    EXPECT_DOUBLE_EQ(link_ratio(run, 1, 0, "backward"), ratio("fp16"));
    EXPECT_DOUBLE_EQ(link_ratio(run, 1, 2, "forward"), ratio(all ? "uniform:8" : "none"));
    EXPECT_DOUBLE_EQ(link_ratio(run, 2, 1, "backward"), ratio(all ? "fp16" : "none"));
    ASSERT_EQ(run.reports.size(), 3u);
    for (const auto& r : run.reports) {
      EXPECT_EQ(r.times.steps, kSteps);
      EXPECT_GT(r.times.forward_s, 0);
      EXPECT_GE(r.times.step_s, r.times.busy_s());
    }
  }
}

TEST(Pipeline, RanksThatDisagreeFailEverywhere) {
  std::vector<torch::nn::Sequential> models{make_mlp(3), make_mlp(3)};
  std::atomic<int> failures{0};
  testing::run_ranks(2, [&](comm::Group& g) {
    PipelineConfig c = config_for(Placement::kLinear, "gpipe", 2, g.rank() == 0 ? 4 : 8, 4);
    try {
      Pipeline p(g, models[static_cast<size_t>(g.rank())], c);
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find("disagree"), std::string::npos);
      ++failures;
    }
  });
  EXPECT_EQ(failures.load(), 2);
}

}  // namespace
}  // namespace dtrain::parallel::pipeline
