#include "dtrain/data/glue.h"

#include <ATen/ATen.h>

#include <fstream>
#include <optional>
#include <stdexcept>
#include <vector>

#include "dtrain/base/names.h"

namespace dtrain::data {
namespace {

const EnumNames<GlueTask> kGlueTaskNames("GLUE task",
                                         {{GlueTask::kRte, "rte"}, {GlueTask::kCola, "cola"}});

std::vector<std::string> split_tabs(const std::string& line) {
  std::vector<std::string> fields;
  size_t begin = 0;
  while (true) {
    const size_t tab = line.find('\t', begin);
    fields.push_back(
        line.substr(begin, tab == std::string::npos ? std::string::npos : tab - begin));
    if (tab == std::string::npos) return fields;
    begin = tab + 1;
  }
}

struct Example {
  std::string a;
  std::optional<std::string> b;
  int64_t label = 0;
};

Example parse_row(const std::vector<std::string>& f, GlueTask task, const std::string& where) {
  const size_t want = 4;
  if (f.size() != want)
    throw std::runtime_error(where + ": expected " + std::to_string(want) +
                             " tab-separated fields (" + to_string(task) + "), found " +
                             std::to_string(f.size()));
  Example e;
  if (task == GlueTask::kRte) {
    e.a = f[1];
    e.b = f[2];
    if (f[3] == "entailment")
      e.label = 0;
    else if (f[3] == "not_entailment")
      e.label = 1;
    else
      throw std::runtime_error(where + ": label '" + f[3] +
                               "' is neither entailment nor not_entailment");
  } else {
    e.a = f[3];
    if (f[1] != "0" && f[1] != "1")
      throw std::runtime_error(where + ": label '" + f[1] + "' is neither 0 nor 1");
    e.label = f[1] == "1" ? 1 : 0;
  }
  if (e.a.empty() || (e.b && e.b->empty())) throw std::runtime_error(where + ": empty sentence");
  return e;
}

}  // namespace

GlueTask parse_glue_task(const std::string& name) {
  return kGlueTaskNames.parse(name);
}

std::string to_string(GlueTask task) {
  return kGlueTaskNames.to_string(task);
}

Dataset read_glue_split(const std::string& path, GlueTask task, const BpeTokenizer& tokenizer,
                        int64_t max_length) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error("missing " + path);
  std::vector<int64_t> ids, labels;
  std::vector<uint8_t> masks;
  std::string line;
  for (int number = 1; std::getline(in, line); ++number) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty()) continue;
    if (task == GlueTask::kRte && number == 1) {
      if (line.rfind("index\t", 0) != 0)
        throw std::runtime_error(path + ":1: expected RTE's header (index, sentence1, ...)");
      continue;
    }
    const Example e = parse_row(split_tabs(line), task, path + ":" + std::to_string(number));
    const Encoding enc = tokenizer.encode(e.a, e.b, max_length);
    ids.insert(ids.end(), enc.ids.begin(), enc.ids.end());
    masks.insert(masks.end(), enc.mask.begin(), enc.mask.end());
    labels.push_back(e.label);
  }
  if (labels.empty()) throw std::runtime_error(path + ": no examples");
  const auto n = static_cast<int64_t>(labels.size());
  Dataset d;
  d.name = path;
  d.images = at::tensor(ids, at::kLong).view({n, max_length});
  d.masks = at::tensor(masks, at::kByte).view({n, max_length});
  d.labels = at::tensor(labels, at::kLong);
  d.num_classes = 2;
  d.matthews = task == GlueTask::kCola;
  return d;
}

Splits load_glue(const DataConfig& c) {
  if (c.data_dir.empty())
    throw std::invalid_argument("--dataset glue needs --data-dir (the task's train.tsv, dev.tsv)");
  if (c.task.empty()) throw std::invalid_argument("--dataset glue needs --task rte|cola");
  const GlueTask task = parse_glue_task(c.task);
  const BpeTokenizer tokenizer =
      BpeTokenizer::from_dir(c.tokenizer_dir.empty() ? c.data_dir : c.tokenizer_dir);
  Splits s;
  s.train = read_glue_split(c.data_dir + "/train.tsv", task, tokenizer, c.max_seq_len);
  s.test = read_glue_split(c.data_dir + "/dev.tsv", task, tokenizer, c.max_seq_len);
  s.train.name = "glue-" + c.task + "-train";
  s.test.name = "glue-" + c.task + "-dev";
  s.vocab_size = tokenizer.vocab_size();
  s.pad_id = tokenizer.pad_id();
  return s;
}

}  // namespace dtrain::data
