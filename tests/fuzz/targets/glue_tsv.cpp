// GLUE TSV splits (data::read_glue_split): the first byte picks the task (even: rte, odd:
// cola), the rest is the file. Any file gives examples of exactly max_length tokens from
// the vocabulary with labels 0 or 1, or a std::runtime_error naming the line.
#include <ATen/core/Tensor.h>

#include <cstdlib>

#include "dtrain/data/glue.h"
#include "fuzz_support.h"

namespace {

constexpr int64_t kMaxLength = 24;

const dtrain::data::BpeTokenizer& tokenizer() {
  static const dtrain::data::BpeTokenizer t = [] {
    std::unordered_map<std::string, int64_t> vocab{
        {"<s>", 0}, {"<pad>", 1}, {"</s>", 2}, {"<unk>", 3}};
    for (const char* s : {"a", "b", "e", "h", "n", "o", "r", "s", "t", "T", "\xC4\xA0", "th", "the",
                          "\xC4\xA0the", "at",
                          "\xC4\xA0"
                          "cat"})
      vocab.emplace(s, static_cast<int64_t>(vocab.size()));
    return dtrain::data::BpeTokenizer(vocab,
                                      {{"t", "h"}, {"th", "e"}, {"\xC4\xA0", "the"}, {"a", "t"}});
  }();
  return t;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const auto task = (data[0] & 1) ? dtrain::data::GlueTask::kCola : dtrain::data::GlueTask::kRte;
  const std::string path =
      dtrain::fuzz::write_input("split.tsv", dtrain::fuzz::as_text(data + 1, size - 1));
  try {
    const auto split = dtrain::data::read_glue_split(path, task, tokenizer(), kMaxLength);
    const int64_t n = split.size();
    if (split.images.sizes() != at::IntArrayRef({n, kMaxLength}) ||
        split.masks.sizes() != at::IntArrayRef({n, kMaxLength}))
      std::abort();
    if (n > 0 && (split.images.min().item<int64_t>() < 0 ||
                  split.images.max().item<int64_t>() >= tokenizer().vocab_size() ||
                  split.labels.min().item<int64_t>() < 0 || split.labels.max().item<int64_t>() > 1))
      std::abort();
  } catch (const std::runtime_error&) {
  }
  return 0;
}
