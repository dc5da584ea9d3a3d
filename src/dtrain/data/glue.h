// GLUE tasks from their TSV files (data_dir/train.tsv and data_dir/dev.tsv, as the GLUE
// download lays them out), tokenized with RoBERTa's tokenizer into fixed-length token ids
// and attention masks.
//   rte:  a header line, then index, sentence1, sentence2, label (entailment = 0,
//         not_entailment = 1), tab-separated
//   cola: no header; source, label (0 or 1), the original judgement mark, sentence
// A malformed row is a std::runtime_error naming the file and line.
#pragma once

#include <string>

#include "dtrain/data/bpe_tokenizer.h"
#include "dtrain/data/dataset.h"

namespace dtrain::data {

enum class GlueTask { kRte, kCola };
GlueTask parse_glue_task(const std::string& name);  // rte | cola
std::string to_string(GlueTask task);

// One split: ids [N, max_length] int64, masks [N, max_length] uint8, labels [N].
Dataset read_glue_split(const std::string& path, GlueTask task, const BpeTokenizer& tokenizer,
                        int64_t max_length);

// train.tsv as the training set and dev.tsv as the test set (GLUE's test labels are hidden).
Splits load_glue(const DataConfig& config);

}  // namespace dtrain::data
