#include "dtrain/train/run_setup.h"

#include <iomanip>
#include <sstream>

#include "dtrain/data/dataset.h"
#include "dtrain/metrics/keys.h"
#include "dtrain/models/registry.h"
#include "dtrain/train/engine.h"

namespace dtrain::train {
namespace {

namespace mkey = metrics::key;

data::Dataset limit(data::Dataset d, int64_t n) {
  if (n > 0 && n < d.size()) {
    d.images = d.images.narrow(0, 0, n);
    d.labels = d.labels.narrow(0, 0, n);
    if (d.masks.defined()) d.masks = d.masks.narrow(0, 0, n);
  }
  return d;
}

}  // namespace

// Loads the data on the ranks that hold it (all but pipeline followers) and completes the
// model's input shape and class count; pipeline followers receive those from rank 0.
Loaded load(const TrainConfig& c, comm::Group* group, bool holds_data) {
  const bool pipelined = c.parallel.mode == ParallelMode::kPipeline;
  Loaded in;
  in.model = c.model;
  if (holds_data) {
    try {
      data::DataConfig dc = c.data;
      dc.seed = c.seed;
      data::Splits splits = data::load(dc);
      in.train_set = limit(splits.train, c.limit_train);
      in.test_set = limit(splits.test, c.limit_test);
      in.digit_like = splits.digit_like;
      if (splits.vocab_size > 0) {
        in.model.transformer.vocab = splits.vocab_size;
        in.model.transformer.pad_id = splits.pad_id;
      }
    } catch (...) {
      if (pipelined) share_model_shape(*group, in.model, true);
      throw;
    }
    if (!models::takes_tokens(in.model)) in.norm = data::channel_stats(in.train_set.images);
    in.model.input_shape = in.train_set.images.sizes().slice(1).vec();
    in.model.num_classes = in.train_set.num_classes;
  }
  if (pipelined) share_model_shape(*group, in.model, false);
  in.model.in_channels = in.model.input_shape[0];
  return in;
}

data::Augment default_augment(const TrainConfig& c, const Loaded& in) {
  data::Augment augment;
  if (in.model.input_shape.size() != 3) return augment;  // text
  const bool colour32 = in.model.input_shape[1] >= 32 && !in.digit_like;
  augment.crop_padding = c.crop_padding >= 0 ? c.crop_padding : (colour32 ? 4 : 0);
  augment.flip = c.flip >= 0 ? c.flip == 1 : !in.digit_like && colour32;
  return augment;
}

std::string epoch_line(const EpochStats& s, int64_t epochs) {
  std::ostringstream line;
  line << "epoch " << s.epoch << "/" << epochs << ": train loss " << std::fixed
       << std::setprecision(4) << s.train_loss << ", test acc " << std::setprecision(2)
       << 100 * s.test_acc << "%, ";
  if (s.extra.contains(mkey::kTestMcc))
    line << "test MCC " << std::setprecision(4) << s.extra[mkey::kTestMcc].get<double>() << ", ";
  line << std::setprecision(0) << s.samples_per_s << " samples/s, " << std::setprecision(1)
       << s.epoch_s << " s";
  if (s.extra.contains(mkey::kWireCheckCost)) {
    line << "; wire check " << std::showpos << std::setprecision(2)
         << 100 * s.extra[mkey::kWireCheckCost].get<double>() << std::noshowpos << " % +- "
         << 100 * s.extra[mkey::kWireCheckCostCi95].get<double>() << " % of step time ("
         << s.extra[mkey::kWireCheckPairs].get<int64_t>() << " pairs)";
  }
  return line.str();
}

// A metrics row as written: with the command line that produced it.
metrics::Row stamped(metrics::Row row, const TrainConfig& c) {
  if (!c.command.empty()) row[mkey::kCommand] = c.command;
  return row;
}

// A JSON-lines output of rank 0's (--metrics, --step-log), continued by a resumed run.
std::ofstream open_rows_file(const std::string& path, const TrainConfig& c, bool leader) {
  std::ofstream out;
  if (path.empty() || !leader) return out;
  out.open(path, c.resume ? std::ios::app : std::ios::trunc);
  if (!out) throw std::runtime_error("cannot write " + path);
  return out;
}

}  // namespace dtrain::train
