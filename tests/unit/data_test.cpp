// Loaders on generated files in the real formats, the sampler, transforms.
#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <zlib.h>

#include <fstream>
#include <set>

#include "dtrain/data/dataset.h"
#include "dtrain/data/loader.h"
#include "dtrain/data/sampler.h"

namespace dtrain::data {
namespace {

std::string temp_dir() {
  char templ[] = "/tmp/dtrain-data-XXXXXX";
  return mkdtemp(templ);
}

std::vector<uint8_t> idx_bytes(const std::vector<int32_t>& dims, const std::vector<uint8_t>& data) {
  std::vector<uint8_t> out{0, 0, 0x08, static_cast<uint8_t>(dims.size())};
  for (int32_t d : dims) {
    for (int s = 24; s >= 0; s -= 8)
      out.push_back(static_cast<uint8_t>(d >> s));
  }
  out.insert(out.end(), data.begin(), data.end());
  return out;
}

void write_file(const std::string& path, const std::vector<uint8_t>& bytes, bool gz) {
  if (gz) {
    gzFile f = gzopen(path.c_str(), "wb");
    gzwrite(f, bytes.data(), static_cast<unsigned>(bytes.size()));
    gzclose(f);
  } else {
    std::ofstream(path, std::ios::binary)
        .write(reinterpret_cast<const char*>(bytes.data()),
               static_cast<std::streamsize>(bytes.size()));
  }
}

void write_mnist(const std::string& dir, bool gz, int n_train = 5, int n_test = 3) {
  const std::string ext = gz ? ".gz" : "";
  for (auto [prefix, n] :
       std::vector<std::pair<std::string, int>>{{"train", n_train}, {"t10k", n_test}}) {
    std::vector<uint8_t> pixels(static_cast<size_t>(n) * 28 * 28), labels(static_cast<size_t>(n));
    for (size_t i = 0; i < pixels.size(); ++i)
      pixels[i] = static_cast<uint8_t>(i * 7);
    for (int i = 0; i < n; ++i)
      labels[static_cast<size_t>(i)] = static_cast<uint8_t>(i % 10);
    write_file(dir + "/" + prefix + "-images-idx3-ubyte" + ext, idx_bytes({n, 28, 28}, pixels), gz);
    write_file(dir + "/" + prefix + "-labels-idx1-ubyte" + ext, idx_bytes({n}, labels), gz);
  }
}

TEST(IdxTest, GzippedAndPlainFilesLoadExactly) {
  for (bool gz : {true, false}) {
    const std::string dir = temp_dir();
    write_mnist(dir, gz);
    DataConfig c;
    c.name = "mnist";
    c.data_dir = dir;
    const Splits s = load(c);
    ASSERT_EQ(s.train.size(), 5);
    ASSERT_EQ(s.test.size(), 3);
    EXPECT_EQ(s.train.images.sizes(), (std::vector<int64_t>{5, 1, 28, 28}));
    EXPECT_EQ(s.train.images[1][0][0][3].item<int>(), static_cast<uint8_t>((784 + 3) * 7));
    EXPECT_EQ(s.train.labels[4].item<int64_t>(), 4);
    EXPECT_TRUE(s.digit_like);
  }
}

TEST(IdxTest, TruncatedAndCorruptFilesNameTheFileAndOffset) {
  const std::string dir = temp_dir();
  auto bytes = idx_bytes({4, 28, 28}, std::vector<uint8_t>(3 * 784, 1));  // one image short
  write_file(dir + "/short", bytes, false);
  try {
    read_idx(dir + "/short");
    FAIL();
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find(dir + "/short: truncated or unreadable at byte"),
              std::string::npos)
        << e.what();
  }
  bytes[2] = 0x0D;  // float type: not ours
  write_file(dir + "/badtype", bytes, true);
  EXPECT_THROW(read_idx(dir + "/badtype"), std::runtime_error);
  EXPECT_THROW(read_idx(dir + "/missing"), std::runtime_error);
}

TEST(CifarTest, BothFormatsLoadAndBadFilesAreRejected) {
  const std::string dir = temp_dir();
  auto record = [](int label_bytes, uint8_t coarse, uint8_t fine, uint8_t fill) {
    std::vector<uint8_t> r;
    if (label_bytes == 2) r.push_back(coarse);
    r.push_back(fine);
    r.resize(r.size() + 3072, fill);
    return r;
  };
  std::vector<uint8_t> c10;
  for (int i = 0; i < 4; ++i) {
    const auto r = record(1, 0, static_cast<uint8_t>(i), static_cast<uint8_t>(10 * i));
    c10.insert(c10.end(), r.begin(), r.end());
  }
  write_file(dir + "/c10.bin", c10, false);
  auto [images, labels] = read_cifar_batch(dir + "/c10.bin", false);
  EXPECT_EQ(images.sizes(), (std::vector<int64_t>{4, 3, 32, 32}));
  EXPECT_EQ(labels[3].item<int64_t>(), 3);
  EXPECT_EQ(images[2][2][31][31].item<int>(), 20);

  std::vector<uint8_t> c100;
  for (int i = 0; i < 3; ++i) {
    const auto r = record(2, 19, static_cast<uint8_t>(97 + i), 5);
    c100.insert(c100.end(), r.begin(), r.end());
  }
  write_file(dir + "/c100.bin", c100, false);
  EXPECT_EQ(read_cifar_batch(dir + "/c100.bin", true).second[2].item<int64_t>(), 99);

  c10.pop_back();
  write_file(dir + "/trunc.bin", c10, false);
  try {
    read_cifar_batch(dir + "/trunc.bin", false);
    FAIL();
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("trunc.bin: byte 9219: truncated record"),
              std::string::npos)
        << e.what();
  }
  c100[3073] = 100;  // fine label of record 1... lies in pixels; corrupt record 1's label instead:
  c100[3074 + 1] = 100;
  write_file(dir + "/badlabel.bin", c100, false);
  EXPECT_THROW(read_cifar_batch(dir + "/badlabel.bin", true), std::runtime_error);
}

TEST(SamplerTest, ShardsAreDisjointCoverTheSetAndAgreeAcrossRanks) {
  for (int64_t n : {0, 1, 10, 101}) {
    for (int world : {1, 2, 3, 8}) {
      for (bool drop : {false, true}) {
        std::multiset<int64_t> all;
        size_t sizes = 0;
        for (int r = 0; r < world; ++r) {
          SamplerConfig c{n, r, world, 42, true, drop};
          const auto mine = shard_indices(c, 3);
          EXPECT_EQ(static_cast<int64_t>(mine.size()), shard_size(c));
          sizes = r == 0 ? mine.size() : sizes;
          EXPECT_EQ(mine.size(), sizes) << "every rank gets as many samples";
          all.insert(mine.begin(), mine.end());
        }
        std::set<int64_t> distinct(all.begin(), all.end());
        if (drop) {
          EXPECT_EQ(all.size(), distinct.size()) << "disjoint";
          EXPECT_EQ(static_cast<int64_t>(all.size()), n / world * world);
        } else {
          EXPECT_EQ(static_cast<int64_t>(distinct.size()), n) << "covers the set";
          EXPECT_LT(static_cast<int64_t>(all.size()) - n, world) << "pads less than a row";
        }
      }
    }
  }
  SamplerConfig c{100, 0, 2, 7, true, false};
  EXPECT_EQ(shard_indices(c, 1), shard_indices(c, 1));
  EXPECT_NE(shard_indices(c, 1), shard_indices(c, 2)) << "reshuffled every epoch";
  EXPECT_THROW(shard_size(SamplerConfig{10, 2, 2, 0, true, false}), std::invalid_argument);
}

TEST(LoaderTest, BatchesFollowTheIndicesAndNormalize) {
  DataConfig c;
  c.name = "synthetic";
  c.input_shape = {3, 8, 8};
  c.synthetic_size = 50;
  const Splits s = load(c);
  const Normalization norm = channel_stats(s.train.images);
  std::vector<int64_t> indices(50);
  for (int64_t i = 0; i < 50; ++i)
    indices[static_cast<size_t>(i)] = 49 - i;
  EpochLoader loader(s.train, indices, 16, norm, {}, 0, 2);
  EXPECT_EQ(loader.batches(), 4);
  int64_t seen = 0;
  std::vector<at::Tensor> all;
  while (auto b = loader.next()) {
    EXPECT_TRUE(at::equal(
        b->labels,
        s.train.labels.index_select(0, at::arange(49 - seen, 49 - seen - b->labels.size(0), -1))));
    seen += b->labels.size(0);
    all.push_back(b->inputs);
  }
  EXPECT_EQ(seen, 50);
  const at::Tensor x = at::cat(all);
  EXPECT_NEAR(x.mean().item<double>(), 0.0, 1e-4);
  EXPECT_NEAR(x.std().item<double>(), 1.0, 0.05);
}

TEST(AugmentTest, CropAndFlipKeepShapesAndAreSeeded) {
  const at::Tensor images = at::randint(0, 255, {6, 3, 32, 32}, at::kByte);
  const Normalization norm{{0.5, 0.5, 0.5}, {0.25, 0.25, 0.25}};
  at::Generator g1 = at::detail::createCPUGenerator(5), g2 = at::detail::createCPUGenerator(5);
  const at::Tensor a = make_batch(images, norm, {4, true}, g1);
  const at::Tensor b = make_batch(images, norm, {4, true}, g2);
  EXPECT_EQ(a.sizes(), images.sizes());
  EXPECT_TRUE(at::equal(a, b));
  at::Generator g3 = at::detail::createCPUGenerator(0);
  const at::Tensor plain = make_batch(images, norm, {}, g3);
  EXPECT_TRUE(at::allclose(plain, (images.to(at::kFloat) / 255 - 0.5) / 0.25));
}

}  // namespace
}  // namespace dtrain::data
