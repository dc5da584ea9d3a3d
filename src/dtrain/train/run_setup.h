// Internal to the trainers (trainer.cpp, elastic_trainer.cpp): what every run sets up the
// same way: the data it trains and tests on, the model config completed from it, the
// default augmentation, the epoch's line for people and the rows for tools.
#pragma once

#include <fstream>
#include <string>

#include "dtrain/data/dataset.h"
#include "dtrain/data/transforms.h"
#include "dtrain/metrics/rows.h"
#include "dtrain/models/registry.h"
#include "dtrain/train/config.h"
#include "dtrain/train/epoch_stats.h"

namespace dtrain::comm {
class Group;
}

namespace dtrain::train {

// What the ranks that hold data loaded, and the model config completed from it.
struct Loaded {
  data::Dataset train_set, test_set;
  data::Normalization norm;
  bool digit_like = false;
  models::ModelConfig model;
};

// Loads the data on the ranks that hold it (all but pipeline followers) and completes the
// model's input shape and class count; pipeline followers receive those from rank 0.
Loaded load(const TrainConfig& c, comm::Group* group, bool holds_data);

data::Augment default_augment(const TrainConfig& c, const Loaded& in);

// "epoch 1/10: train loss ..., test acc ...%, ... samples/s, ... s"
std::string epoch_line(const EpochStats& s, int64_t epochs);

// A metrics row as written: with the command line that produced it.
metrics::Row stamped(metrics::Row row, const TrainConfig& c);

// A JSON-lines output of rank 0's (--metrics, --step-log), continued by a resumed run.
std::ofstream open_rows_file(const std::string& path, const TrainConfig& c, bool leader);

}  // namespace dtrain::train
