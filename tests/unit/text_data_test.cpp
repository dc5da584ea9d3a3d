// Text data and its formats: safetensors files (round trip and every malformation the
// reader must name), GLUE's TSV files through the tokenizer, and Matthews correlation.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <unistd.h>

#include <cstdio>
#include <fstream>

#include "dtrain/data/glue.h"
#include "dtrain/models/loss.h"
#include "dtrain/models/safetensors.h"

namespace dtrain {
namespace {

std::string temp_file(const std::string& name) {
  return "/tmp/dtrain-text-" + std::to_string(getpid()) + "-" + name;
}

std::string bytes_of(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// A file of `header` (JSON) followed by `data` bytes.
void write_raw(const std::string& path, const std::string& header, const std::string& data) {
  std::ofstream out(path, std::ios::binary);
  for (int i = 0; i < 8; ++i)
    out.put(static_cast<char>((header.size() >> (8 * i)) & 0xff));
  out << header << data;
}

void expect_refused(const std::string& path, const std::string& what) {
  try {
    models::read_safetensors(path);
    ADD_FAILURE() << "read a file that should be refused for: " << what;
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
  }
}

TEST(SafetensorsTest, RoundTripKeepsDtypesShapesValuesAndMetadata) {
  const std::string path = temp_file("round.safetensors");
  std::map<std::string, at::Tensor> tensors{{"a.weight", torch::randn({3, 4})},
                                            {"b", torch::arange(5, torch::kLong)},
                                            {"half", torch::randn({2}).to(torch::kHalf)},
                                            {"scalar", torch::tensor(2.5, torch::kDouble)},
                                            {"empty", torch::zeros({0, 3})}};
  models::write_safetensors(path, tensors, {{"format", "pt"}});
  const auto file = models::read_safetensors(path);
  ASSERT_EQ(file.tensors.size(), tensors.size());
  for (const auto& [name, t] : tensors) {
    EXPECT_EQ(file.tensors.at(name).scalar_type(), t.scalar_type()) << name;
    EXPECT_TRUE(torch::equal(file.tensors.at(name), t)) << name;
  }
  EXPECT_EQ(file.metadata.at("format"), "pt");
  EXPECT_EQ(bytes_of(path).substr(8, 1), "{");
  std::remove(path.c_str());
}

TEST(SafetensorsTest, EveryMalformationIsNamed) {
  const std::string path = temp_file("bad.safetensors");
  const std::string f32x2 = std::string(8, '\0');
  std::ofstream(path, std::ios::binary) << "abc";
  expect_refused(path, "too short");
  write_raw(path, R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}})", "");
  expect_refused(path, "cover 8 of the 0 data bytes");  // the data is missing
  std::ofstream(path, std::ios::binary)
      << std::string("\xff\xff\xff\xff\x00\x00\x00\x00", 8) << "{}";
  expect_refused(path, "exceeds");
  std::ofstream(path, std::ios::binary)
      << std::string("\x40\x00\x00\x00\x00\x00\x00\x00", 8) << "{}";
  expect_refused(path, "runs past the end");
  write_raw(path, "{not json", "");
  expect_refused(path, "not a JSON object");
  write_raw(path, R"({"a": {"dtype": "F31", "shape": [2], "data_offsets": [0, 8]}})", f32x2);
  expect_refused(path, "unsupported dtype 'F31'");
  write_raw(path, R"({"a": {"dtype": "F32", "shape": [3], "data_offsets": [0, 8]}})", f32x2);
  expect_refused(path, "need 12");
  write_raw(path, R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [8, 0]}})", f32x2);
  expect_refused(path, "end before");
  write_raw(path, R"({"a": {"dtype": "F32", "shape": [-2], "data_offsets": [0, 8]}})", f32x2);
  expect_refused(path, "negative dimension");
  write_raw(path, R"({"a": {"dtype": "F32", "shape": [2]}})", f32x2);
  expect_refused(path, "missing \"data_offsets\"");
  write_raw(path,
            R"({"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]},
                "b": {"dtype": "F32", "shape": [1], "data_offsets": [8, 12]}})",
            std::string(12, '\0'));
  expect_refused(path, "(a hole)");
  write_raw(path,
            R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
                "b": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}})",
            f32x2);
  expect_refused(path, "(overlap)");
  write_raw(path,
            R"({"a": {"dtype": "F32", "shape": [4611686018427387904, 8], "data_offsets": [0, 8]}})",
            f32x2);
  expect_refused(path, "overflows");
  std::remove(path.c_str());
}

class GlueTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char templ[] = "/tmp/dtrain-glue-XXXXXX";
    dir = mkdtemp(templ);
    std::ofstream(dir + "/vocab.json")
        << R"({"<s>": 0, "<pad>": 1, "</s>": 2, "<unk>": 3, "a": 4, "b": 5, "Ġ": 6})";
    std::ofstream(dir + "/merges.txt") << "#version: 0.2\n";
  }
  void TearDown() override {
    for (const char* f : {"vocab.json", "merges.txt", "train.tsv", "dev.tsv"})
      std::remove((dir + "/" + f).c_str());
    rmdir(dir.c_str());
  }
  data::Dataset read(const std::string& text, data::GlueTask task, int64_t length = 8) {
    std::ofstream(dir + "/train.tsv") << text;
    return data::read_glue_split(dir + "/train.tsv", task, data::BpeTokenizer::from_dir(dir),
                                 length);
  }
  void expect_error(const std::string& text, data::GlueTask task, const std::string& what) {
    try {
      read(text, task);
      ADD_FAILURE() << "read a malformed file: " << what;
    } catch (const std::runtime_error& e) {
      EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
    }
  }
  std::string dir;
};

TEST_F(GlueTest, RteRowsBecomePairsWithLabelsAndMasks) {
  const auto d =
      read("index\tsentence1\tsentence2\tlabel\n0\ta b\tb\tentailment\n1\ta\ta\tnot_entailment\n",
           data::GlueTask::kRte);
  ASSERT_EQ(d.size(), 2);
  EXPECT_TRUE(torch::equal(d.labels, torch::tensor({0, 1}, torch::kLong)));
  // <s> a Ġ b </s></s> b </s>
  EXPECT_TRUE(torch::equal(d.images[0], torch::tensor({0, 4, 6, 5, 2, 2, 5, 2}, torch::kLong)));
  EXPECT_TRUE(torch::equal(d.images[1], torch::tensor({0, 4, 2, 2, 4, 2, 1, 1}, torch::kLong)));
  EXPECT_EQ(d.masks[1].sum().item<int64_t>(), 6);
  EXPECT_FALSE(d.matthews);
}

TEST_F(GlueTest, ColaRowsHaveNoHeaderAndReportMatthews) {
  const auto d = read("gj04\t1\t\ta b\ngj04\t0\t*\tb a\n", data::GlueTask::kCola);
  ASSERT_EQ(d.size(), 2);
  EXPECT_TRUE(torch::equal(d.labels, torch::tensor({1, 0}, torch::kLong)));
  EXPECT_TRUE(d.matthews);
}

TEST_F(GlueTest, MalformedRowsNameFileAndLine) {
  expect_error("gj04\t1\t\ta b\ngj04\t2\t\tb\n", data::GlueTask::kCola, "train.tsv:2: label '2'");
  expect_error("gj04\t1\ta b\n", data::GlueTask::kCola, "train.tsv:1: expected 4");
  expect_error("index\ts1\ts2\tlabel\n0\ta\tb\tmaybe\n", data::GlueTask::kRte, "train.tsv:2");
  expect_error("0\ta\tb\tentailment\n", data::GlueTask::kRte, "header");
  expect_error("", data::GlueTask::kCola, "no examples");
  EXPECT_THROW(data::parse_glue_task("sst2"), std::invalid_argument);
}

TEST(MatthewsTest, AgreesWithItsDefinition) {
  // tn, fp, fn, tp
  EXPECT_DOUBLE_EQ(models::matthews_correlation({5, 0, 0, 5}), 1.0);
  EXPECT_DOUBLE_EQ(models::matthews_correlation({0, 5, 5, 0}), -1.0);
  EXPECT_DOUBLE_EQ(models::matthews_correlation({0, 0, 3, 7}), 0.0);  // one predicted class
  // (tp*tn - fp*fn) / sqrt(...) = (6*3 - 2*1) / sqrt(8*7*5*4)
  EXPECT_NEAR(models::matthews_correlation({3, 2, 1, 6}), 16.0 / std::sqrt(1120.0), 1e-12);
  const auto logits = torch::tensor({{2.0, 1.0}, {0.0, 1.0}, {3.0, 0.0}, {0.0, 5.0}});
  const auto counts = models::count_confusion(logits, torch::tensor({0, 0, 1, 1}, torch::kLong));
  EXPECT_EQ(counts, (std::array<int64_t, 4>{1, 1, 1, 1}));
}

}  // namespace
}  // namespace dtrain
