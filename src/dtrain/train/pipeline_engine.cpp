// Pipeline mode on the driver (rank 0): steps go through parallel::pipeline::Pipeline, and
// each epoch's per-rank reports become EpochStats::extra.
#include <algorithm>

#include "dtrain/parallel/pipeline/pipeline.h"
#include "dtrain/train/engine.h"

namespace dtrain::train {
namespace {

namespace pp = parallel::pipeline;

BatchResult to_batch_result(const pp::StepResult& r) {
  return {r.loss_sum, r.correct, r.samples};
}

metrics::Row report_extra(const std::vector<pp::RankReport>& reports, const pp::PipelineConfig& c) {
  metrics::Row extra;
  double wire = 0, fp32 = 0, bubble_sum = 0;
  int counted = 0;
  nlohmann::ordered_json stages = nlohmann::ordered_json::array();
  nlohmann::ordered_json links = nlohmann::ordered_json::array();
  for (const auto& r : reports) {
    const auto& t = r.times;
    const double bubble = t.step_s > 0 ? std::max(0.0, t.idle_s()) / t.step_s : 0.0;
    if (t.step_s > 0) {
      bubble_sum += bubble;
      ++counted;
    }
    metrics::Row s;
    s["rank"] = r.rank;
    std::string blocks;
    for (const auto& b : r.blocks)
      blocks += (blocks.empty() ? "" : ",") + b;
    s["blocks"] = blocks;
    s["forward_s"] = t.forward_s;
    s["backward_s"] = t.backward_s;
    s["encode_s"] = t.encode_s;
    s["decode_s"] = t.decode_s;
    s["recv_wait_s"] = t.recv_wait_s;
    s["send_wait_s"] = t.send_wait_s;
    s["idle_s"] = std::max(0.0, t.idle_s());
    s["step_s"] = t.step_s;
    s["bubble"] = bubble;
    s["peak_rss_bytes"] = r.peak_rss_bytes;
    stages.push_back(s);
    for (const auto& l : r.links) {
      wire += static_cast<double>(l.bytes);
      fp32 += static_cast<double>(l.fp32_bytes);
      metrics::Row row;
      row["src"] = l.src;
      row["dst"] = l.dst;
      row["direction"] = l.direction;
      row["bytes"] = l.bytes;
      row["messages"] = l.messages;
      row["recv_time_s"] = l.recv_time_s;
      row["bandwidth_gbps"] =
          l.recv_time_s > 0 ? static_cast<double>(l.bytes) / l.recv_time_s / 1e9 : 0.0;
      row["ratio"] =
          l.fp32_bytes > 0 ? static_cast<double>(l.bytes) / static_cast<double>(l.fp32_bytes) : 1.0;
      links.push_back(row);
    }
  }
  const int ranks = static_cast<int>(reports.size());
  extra["compression_ratio"] = fp32 > 0 ? wire / fp32 : 1.0;
  extra["bubble_measured"] = counted > 0 ? bubble_sum / counted : 0.0;
  extra["bubble_ideal"] = pp::ideal_bubble(ranks, c.micro_batches);
  extra["stages"] = stages;
  extra["links"] = links;
  return extra;
}

class PipelineEngine final : public Engine {
 public:
  explicit PipelineEngine(pp::Pipeline& pipeline) : pipeline_(pipeline) {
    for (const auto& m : pipeline.stage_modules()) {
      std::ptrdiff_t i = 0;
      for (const auto& named : m->named_children())
        local_->push_back(named.key(), m->begin()[i++]);
    }
  }

  std::vector<at::Tensor> parameters() override { return pipeline_.parameters(); }

  BatchResult train_batch(const data::Batch& batch, double lr, const StepPlan&,
                          EpochStats&) override {
    return to_batch_result(pipeline_.train_batch(batch.inputs, batch.labels, lr));
  }

  BatchResult eval_batch(const at::Tensor& inputs, const at::Tensor& labels) override {
    return to_batch_result(pipeline_.eval_batch(inputs, labels));
  }

  void end_epoch(EpochStats& s) override {
    const auto reports = pipeline_.collect_reports();
    const auto& mine = reports.front().times;
    s.time_forward_s = mine.forward_s;
    s.time_backward_s = mine.backward_s;
    s.time_comm_s = mine.recv_wait_s + mine.send_wait_s + mine.encode_s + mine.decode_s;
    const metrics::Row extra = report_extra(reports, pipeline_.config());
    for (const auto& [key, value] : extra.items())
      s.extra[key] = value;
  }

  void finish() override { pipeline_.stop(); }

  torch::nn::Sequential& checkpoint_module() override { return local_; }

 private:
  pp::Pipeline& pipeline_;
  torch::nn::Sequential local_;
};

}  // namespace

std::unique_ptr<Engine> make_pipeline_engine(parallel::pipeline::Pipeline& pipeline) {
  return std::make_unique<PipelineEngine>(pipeline);
}

}  // namespace dtrain::train
