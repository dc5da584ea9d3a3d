// RoBERTa's tokenizer (data/bpe_tokenizer.h, data/pretokenize.h) on a tiny vocabulary: the
// 256 byte symbols, the special tokens and a few merges. The expected ids of the tricky
// strings (spaces, tabs and newlines, punctuation, contractions, numbers, accents, CJK,
// emoji, a no-break space) were checked by hand and agree with Hugging Face's tokenizers
// (ByteLevel pre-tokenizer, BPE, RobertaProcessing) given the same two files.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdio>
#include <fstream>

#include "dtrain/data/bpe_tokenizer.h"
#include "dtrain/data/pretokenize.h"

namespace dtrain::data {
namespace {

const std::vector<std::string> kMerges{"Ġ t", "h e", "Ġt he", "i n", "Ġ a",    "a n", "Ġa n",
                                       "1 2", "Ġ 1", "' s",   "e r", "Ġ Ġ",    "Ã ©", "c Ã©",
                                       "Ġ w", "o r", "Ġw or", "l d", "Ġwor ld"};

// Specials 0-3, byte b at 4 + b, then each merge's product in merge order.
BpeTokenizer tiny() {
  std::unordered_map<std::string, int64_t> vocab{
      {"<s>", 0}, {"<pad>", 1}, {"</s>", 2}, {"<unk>", 3}};
  for (int b = 0; b < 256; ++b)
    vocab[byte_symbol(static_cast<unsigned char>(b))] = 4 + b;
  std::vector<std::pair<std::string, std::string>> merges;
  for (const auto& m : kMerges) {
    const auto space = m.find(' ');
    merges.emplace_back(m.substr(0, space), m.substr(space + 1));
    const std::string product = merges.back().first + merges.back().second;
    if (!vocab.count(product)) vocab[product] = static_cast<int64_t>(vocab.size());
  }
  return BpeTokenizer(vocab, merges);
}

using Ids = std::vector<int64_t>;

TEST(TokenizerTest, ByteSymbolsAreGpt2s) {
  EXPECT_EQ(byte_symbol(' '), "Ġ");
  EXPECT_EQ(byte_symbol('\n'), "Ċ");
  EXPECT_EQ(byte_symbol('A'), "A");
  EXPECT_EQ(byte_symbol(0xA0), "ł");
  EXPECT_EQ(byte_symbol(0xE9), "é");
}

TEST(TokenizerTest, PreTokenizerFollowsGpt2sPattern) {
  EXPECT_EQ(pretokenize("Hello, world!"), (std::vector<std::string>{"Hello", ",", " world", "!"}));
  EXPECT_EQ(pretokenize("  the   an\tin\n\nthe"),
            (std::vector<std::string>{" ", " the", "  ", " an", "\t", "in", "\n", "\n", "the"}));
  EXPECT_EQ(pretokenize("don't  "), (std::vector<std::string>{"don", "'t", "  "}));
  EXPECT_EQ(pretokenize("x12 ½ ²"), (std::vector<std::string>{"x", "12", " ½", " ²"}));
  EXPECT_EQ(pretokenize("'s're'll"), (std::vector<std::string>{"'s", "'re", "'ll"}));
  EXPECT_EQ(pretokenize("naïve 日本語"), (std::vector<std::string>{"naïve", " 日本語"}));
  EXPECT_TRUE(pretokenize("").empty());
}

TEST(TokenizerTest, TrickyStringsEncodeAsHuggingFacesDoes) {
  const BpeTokenizer t = tiny();
  EXPECT_EQ(t.encode_text("the world"), (Ids{120, 261, 278}));
  EXPECT_EQ(t.encode_text("Hello, world!"), (Ids{76, 105, 112, 112, 115, 48, 278, 37}));
  EXPECT_EQ(t.encode_text("  the   an\tin\n\nthe"),
            (Ids{36, 262, 271, 266, 13, 263, 14, 14, 120, 261}));
  EXPECT_EQ(t.encode_text("it's 123 café's"),
            (Ids{109, 120, 269, 36, 267, 55, 36, 103, 101, 106, 272, 269}));
  EXPECT_EQ(t.encode_text("naïve 日本語 😀"),
            (Ids{114, 101, 199, 179, 122, 105, 36,  234, 155, 169, 234,
                 160, 176, 236, 174, 162, 36,  244, 163, 156, 132}));
  EXPECT_EQ(t.encode_text("x12 ½ ², done."),
            (Ids{124, 267, 36, 198, 193, 36, 198, 182, 48, 36, 104, 115, 114, 105, 50}));
  EXPECT_EQ(t.encode_text("don't  "), (Ids{104, 115, 114, 43, 120, 271}));
  EXPECT_EQ(t.encode_text("'s're'll"), (Ids{269, 43, 118, 105, 43, 112, 112}));
  EXPECT_EQ(t.encode_text("a\u00a0an"), (Ids{101, 198, 164, 265}));
  EXPECT_TRUE(t.encode_text("").empty());
  EXPECT_EQ(t.encode_text("\xff\xfe"), (Ids{4 + 0xff, 4 + 0xfe}));  // invalid UTF-8: bytes
}

TEST(TokenizerTest, PairsAreFormattedTruncatedAndPaddedAsRobertas) {
  const BpeTokenizer t = tiny();
  const Encoding pair = t.encode("the world", std::string("an in"), 12);
  EXPECT_EQ(pair.ids, (Ids{0, 120, 261, 278, 2, 2, 265, 36, 263, 2, 1, 1}));
  EXPECT_EQ(pair.mask, (std::vector<uint8_t>{1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0}));
  EXPECT_FALSE(pair.truncated);
  // 3 + 3 tokens into 8 - 4 places: longest first, the second on a tie.
  const Encoding cut = t.encode("the world", std::string("an in"), 8);
  EXPECT_EQ(cut.ids, (Ids{0, 120, 261, 2, 2, 265, 36, 2}));
  EXPECT_TRUE(cut.truncated);
  const Encoding single = t.encode("the world", std::nullopt, 4);
  EXPECT_EQ(single.ids, (Ids{0, 120, 261, 2}));
  EXPECT_THROW(t.encode("a", std::string("b"), 5), std::invalid_argument);
}

TEST(TokenizerTest, FilesAreReadAndMalformedOnesNamed) {
  char templ[] = "/tmp/dtrain-tok-XXXXXX";
  const std::string dir = mkdtemp(templ);
  std::ofstream(dir + "/vocab.json")
      << R"({"<s>": 0, "<pad>": 1, "</s>": 2, "<unk>": 3, "a": 4, "b": 5, "ab": 6})";
  std::ofstream(dir + "/merges.txt") << "#version: 0.2\na b\n";
  const BpeTokenizer t = BpeTokenizer::from_dir(dir);
  EXPECT_EQ(t.encode_text("ab"), (Ids{6}));
  EXPECT_EQ(t.encode_text("c"), (Ids{3}));  // not in the vocabulary: <unk>
  EXPECT_EQ(t.vocab_size(), 7);
  std::ofstream(dir + "/merges.txt") << "#version: 0.2\na b\nab\n";
  try {
    BpeTokenizer::from_dir(dir);
    FAIL() << "a malformed merges.txt was read";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("merges.txt:3"), std::string::npos) << e.what();
  }
  std::ofstream(dir + "/merges.txt") << "a b\n";
  std::ofstream(dir + "/vocab.json") << R"({"a": 4})";
  EXPECT_THROW(BpeTokenizer::from_dir(dir), std::runtime_error);  // no special tokens
  std::ofstream(dir + "/vocab.json") << "[1, 2";
  EXPECT_THROW(BpeTokenizer::from_dir(dir), std::runtime_error);
  std::remove((dir + "/vocab.json").c_str());
  std::remove((dir + "/merges.txt").c_str());
  rmdir(dir.c_str());
}

}  // namespace
}  // namespace dtrain::data
