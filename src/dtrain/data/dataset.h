// Datasets held in memory: images as uint8 (real data) or float (synthetic) [N, C, H, W],
// or text as token ids int64 [N, T] with attention masks; labels int64 [N]. Loaders
// validate their files and name the file and byte offset (or line) of any problem.
#pragma once

#include <ATen/core/Tensor.h>

#include <string>
#include <vector>

namespace dtrain::data {

struct Dataset {
  std::string name;
  at::Tensor images;  // uint8 or float32, [N, C, H, W]; text: token ids int64 [N, T]
  at::Tensor masks;   // text only: uint8 [N, T], 1 where a token is real
  at::Tensor labels;  // int64, [N]
  int64_t num_classes = 0;
  bool matthews = false;  // the task's metric is Matthews correlation (CoLA), beside accuracy
  int64_t size() const { return labels.defined() ? labels.size(0) : 0; }
};

struct DataConfig {
  std::string name = "fashion-mnist";
  std::string data_dir;                         // empty: the dataset's default location
  std::vector<int64_t> input_shape{1, 28, 28};  // synthetic only
  int64_t num_classes = 10;                     // synthetic only
  int64_t synthetic_size = 10000;               // synthetic train size (test: a fifth)
  uint64_t seed = 0;
  std::string task;           // glue: rte | cola
  std::string tokenizer_dir;  // glue: vocab.json and merges.txt (default: data_dir)
  int64_t max_seq_len = 128;  // glue: tokens per example, padded
};

struct Splits {
  Dataset train;
  Dataset test;
  bool digit_like = false;  // no horizontal flips by default
  int64_t vocab_size = 0;   // text: the tokenizer's
  int64_t pad_id = 1;       // text: the tokenizer's padding id
};

// fashion-mnist | mnist | cifar10 | cifar100 | synthetic | glue (glue.h). Throws std::runtime_error
// with the file and offset on missing, truncated or corrupt files.
Splits load(const DataConfig& config);

std::string default_data_dir(const std::string& name);

// IDX (LeCun) file, gzipped or not: unsigned-byte data with its dimensions.
at::Tensor read_idx(const std::string& path);

// CIFAR binary batches: 1 label byte (cifar10) or coarse+fine label bytes (cifar100), then
// 3072 pixel bytes per record. Returns {images [N,3,32,32] uint8, labels int64}.
std::pair<at::Tensor, at::Tensor> read_cifar_batch(const std::string& path, bool cifar100);

Splits make_synthetic(const DataConfig& config);

}  // namespace dtrain::data
