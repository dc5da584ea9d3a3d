// Loaders on generated files in the real formats, the sampler, transforms.
#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <zlib.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <set>

#include "dtrain/data/dataset.h"
#include "dtrain/data/decoded_cache.h"
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

// DTRAIN_CACHE_DIR for one test, as it was before after it.
class CacheDirFor {
 public:
  explicit CacheDirFor(const std::string& dir) {
    if (const char* was = std::getenv("DTRAIN_CACHE_DIR")) was_ = was;
    setenv("DTRAIN_CACHE_DIR", dir.c_str(), 1);
  }
  ~CacheDirFor() {
    if (was_)
      setenv("DTRAIN_CACHE_DIR", was_->c_str(), 1);
    else
      unsetenv("DTRAIN_CACHE_DIR");
  }

 private:
  std::optional<std::string> was_;
};

std::vector<std::string> files_in(const std::string& dir) {
  std::vector<std::string> out;
  if (!std::filesystem::exists(dir)) return out;
  for (const auto& e : std::filesystem::directory_iterator(dir))
    out.push_back(e.path().string());
  return out;
}

std::vector<uint8_t> bytes_of(const at::Tensor& t) {
  const uint8_t* p = t.data_ptr<uint8_t>();
  return {p, p + t.numel()};
}

TEST(DecodedCacheTest, AGzippedFileIsReadBackFromItsDecodedCopyWhileTheCopyHolds) {
  const std::string dir = temp_dir();
  const CacheDirFor cache_dir(dir + "/cache");
  std::vector<uint8_t> pixels(6 * 28 * 28);
  for (size_t i = 0; i < pixels.size(); ++i)
    pixels[i] = static_cast<uint8_t>(i * 13);
  const std::vector<uint8_t> file = idx_bytes({6, 28, 28}, pixels);
  write_file(dir + "/images.gz", file, true);
  EXPECT_EQ(bytes_of(read_idx(dir + "/images.gz")), pixels);  // decoded, and kept
  const auto copies = files_in(dir + "/cache");
  ASSERT_EQ(copies.size(), 1u);
  const auto cache = DecodedCache::for_file(dir + "/images.gz");
  ASSERT_TRUE(cache);
  EXPECT_EQ(cache->copy_path(), copies[0]);
  ASSERT_TRUE(cache->read());
  EXPECT_EQ(*cache->read(), file);

  // The copy is what a second read returns: one kept with other (valid) bytes shows.
  std::vector<uint8_t> other = file;
  other[16 + 5] ^= 0xff;
  cache->keep({{other.data(), other.size()}});
  EXPECT_EQ(read_idx(dir + "/images.gz")[0][0][5].item<int>(), (5 * 13) ^ 0xff);

  // A damaged copy (a byte flipped after its checksum) is ignored and replaced.
  {
    std::fstream f(copies[0], std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(-1, std::ios::end);
    f.put('\x5a');
  }
  EXPECT_FALSE(cache->read());
  EXPECT_EQ(bytes_of(read_idx(dir + "/images.gz")), pixels);
  ASSERT_TRUE(cache->read());
  EXPECT_EQ(*cache->read(), file);
}

TEST(DecodedCacheTest, AFileRewrittenInPlaceWithOtherBytesOfItsSizeMissesTheOldCopy) {
  const std::string dir = temp_dir();
  const CacheDirFor cache_dir(dir + "/cache");
  std::vector<uint8_t> pixels(4 * 28 * 28, 7);
  write_file(dir + "/images.gz", idx_bytes({4, 28, 28}, pixels), true);
  EXPECT_EQ(bytes_of(read_idx(dir + "/images.gz")), pixels);
  pixels.assign(pixels.size(), 9);  // same dimensions, same length, within the same tick
  write_file(dir + "/images.gz", idx_bytes({4, 28, 28}, pixels), true);
  EXPECT_EQ(bytes_of(read_idx(dir + "/images.gz")), pixels);
  EXPECT_EQ(files_in(dir + "/cache").size(), 2u);
}

TEST(DecodedCacheTest, NoneKeepsNothingAndPlainFilesAreNotCopied) {
  const std::string dir = temp_dir();
  const std::vector<uint8_t> pixels(3 * 28 * 28, 3);
  write_file(dir + "/images.gz", idx_bytes({3, 28, 28}, pixels), true);
  write_file(dir + "/images", idx_bytes({3, 28, 28}, pixels), false);
  {
    const CacheDirFor off("none");
    EXPECT_EQ(decoded_cache_dir(), "");
    EXPECT_FALSE(DecodedCache::for_file(dir + "/images.gz"));
    EXPECT_EQ(bytes_of(read_idx(dir + "/images.gz")), pixels);
  }
  const CacheDirFor on(dir + "/cache");
  EXPECT_EQ(decoded_cache_dir(), dir + "/cache");
  EXPECT_FALSE(DecodedCache::for_file(dir + "/images"));
  EXPECT_EQ(bytes_of(read_idx(dir + "/images")), pixels);
  EXPECT_TRUE(files_in(dir + "/cache").empty());
  // A truncated gzipped file is still reported as one, not hidden by the cache.
  std::vector<uint8_t> short_file = idx_bytes({3, 28, 28}, pixels);
  short_file.resize(short_file.size() - 28);
  write_file(dir + "/short.gz", short_file, true);
  EXPECT_THROW(read_idx(dir + "/short.gz"), std::runtime_error);
  EXPECT_TRUE(files_in(dir + "/cache").empty());
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

TEST(TransformsTest, ByteImagesChannelStatisticsEqualAFloat64ReductionOfTheirUnitFloats) {
  at::manual_seed(3);
  const at::Tensor images = at::randint(0, 256, {37, 3, 5, 7}, at::kByte);
  const Normalization norm = channel_stats(images);
  ASSERT_EQ(norm.mean.size(), 3u);
  for (int64_t c = 0; c < 3; ++c) {
    const at::Tensor x = images.select(1, c).to(at::kFloat).div(255.0).to(at::kDouble);
    EXPECT_NEAR(norm.mean[static_cast<size_t>(c)], x.mean().item<double>(), 1e-12);
    EXPECT_NEAR(norm.std[static_cast<size_t>(c)], x.std().item<double>(), 1e-12);
  }
  const Normalization flat = channel_stats(at::full({4, 1, 2, 2}, 9, at::kByte));
  EXPECT_NEAR(flat.mean[0], 9.0 / 255.0, 1e-7);
  EXPECT_EQ(flat.std[0], 1e-6);  // no spread: the floor
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
