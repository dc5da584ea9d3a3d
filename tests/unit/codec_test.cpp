// Codecs against their error bounds and against independent references.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <cstring>

#include <cmath>
#include <random>

#include "dtrain/compress/baselines.h"
#include "dtrain/compress/bitpack.h"
#include "dtrain/compress/codec.h"
#include "dtrain/compress/error_feedback.h"

namespace dtrain::compress {
namespace {

std::vector<float> table_of(const Packet& p) {
  const PacketInfo info = inspect(p.data(), p.size());
  std::vector<float> t(info.table_bytes / 4);
  std::memcpy(t.data(), p.data() + info.header_bytes, info.table_bytes);
  return t;
}

std::vector<uint16_t> codes_of(const Packet& p) {
  const PacketInfo info = inspect(p.data(), p.size());
  std::vector<uint16_t> codes(static_cast<size_t>(info.numel));
  unpack_bits(p.data() + info.header_bytes + info.table_bytes, info.numel, info.spec.bits,
              codes.data(), 0);
  return codes;
}

at::Tensor sample(const std::string& dist, int64_t n, uint64_t seed) {
  at::manual_seed(seed);
  if (dist == "gaussian") return at::randn({n});
  if (dist == "relu") return at::relu(at::randn({n}));
  if (dist == "uniform") return at::rand({n}) * 10 - 3;
  if (dist == "ties") return at::randint(0, 5, {n}).to(at::kFloat) * 0.5f;
  if (dist == "heavy") return at::randn({n}) / (at::rand({n}) + 1e-3);
  throw std::invalid_argument(dist);
}

TEST(CodecNameTest, ParsesEveryFamilyAndTheShorthand) {
  EXPECT_EQ(parse_codec("none").bits, 32);
  EXPECT_EQ(parse_codec("fp16").id, CodecId::kFp16);
  EXPECT_EQ(parse_codec("uniform:8").bits, 8);
  const CodecSpec s8 = parse_codec("sortquant:8");
  EXPECT_EQ(s8.bits, 8);
  EXPECT_EQ(s8.split_bits, 2);
  EXPECT_EQ(parse_codec("sortquant:16").split_bits, 4);
  EXPECT_EQ(parse_codec("sortquant:12").split_bits, 3);
  EXPECT_EQ(parse_codec("sortquant:4").split_bits, 1);
  EXPECT_EQ(to_string(parse_codec("sortquant:3:3")), "sortquant:3:3");
  EXPECT_EQ(parse_codec("kmeans:4:20").iters, 20);
  for (const char* bad :
       {"uniform", "uniform:0", "uniform:17", "uniform:x", "sortquant:0:3", "sortquant:10:7",
        "sortquant:6", "kmeans:9", "kmeans:4:0", "zstd", "fp16:2", "none:1"}) {
    EXPECT_THROW(parse_codec(bad), std::invalid_argument) << bad;
  }
}

TEST(BitPackTest, EveryWidthRoundTripsInBlocksAndCostsExactlyItsBits) {
  std::mt19937 rng(7);
  for (int bits = 1; bits <= 16; ++bits) {
    for (int64_t n : {0, 1, 7, 8, 9, 1000, 8195}) {
      std::vector<uint16_t> codes(static_cast<size_t>(n));
      for (auto& c : codes)
        c = static_cast<uint16_t>(rng() & ((1u << bits) - 1));
      std::vector<uint8_t> packed(packed_bytes(n, bits), 0xAB);
      for (int64_t start = 0; start < n; start += 4096) {
        pack_bits(codes.data() + start, std::min<int64_t>(4096, n - start), bits, packed.data(),
                  start);
      }
      EXPECT_EQ(packed.size(), static_cast<size_t>((n * bits + 7) / 8));
      std::vector<uint16_t> back(static_cast<size_t>(n));
      for (int64_t start = 0; start < n; start += 4096) {
        unpack_bits(packed.data(), std::min<int64_t>(4096, n - start), bits, back.data() + start,
                    start);
      }
      EXPECT_EQ(back, codes) << "bits " << bits << " n " << n;
    }
  }
}

TEST(UniformTest, ErrorIsAtMostHalfAStep) {
  for (int bits : {1, 2, 4, 8, 12, 16}) {
    for (const char* dist : {"gaussian", "relu", "heavy", "ties"}) {
      const at::Tensor x = sample(dist, 10007, static_cast<uint64_t>(bits));
      const auto codec = make_codec("uniform:" + std::to_string(bits));
      const Packet p = encode(*codec, x);
      const at::Tensor y = decode(p);
      const float lo = table_of(p)[0], step = table_of(p)[1];
      EXPECT_FLOAT_EQ(lo, x.min().item<float>());
      const float slack = 1e-6f * x.abs().max().item<float>();
      EXPECT_LE((x - y).abs().max().item<float>(), step / 2 + slack) << bits << " " << dist;
      EXPECT_EQ(p.size(),
                inspect(p.data(), p.size()).header_bytes + 8 + packed_bytes(x.numel(), bits));
    }
  }
}

TEST(SortQuantTest, EqualsTheSortingReferenceElementForElementWithoutTies) {
  for (auto [q, s] :
       std::vector<std::pair<int, int>>{{6, 2}, {3, 1}, {9, 3}, {12, 4}, {1, 4}, {5, 0}}) {
    for (int64_t n : {1, 3, 17, 1000, 65537}) {
      // Distinct values: unique normals in random order.
      const at::Tensor pool = std::get<0>(at::_unique(at::randn({2 * n + 8}) * 3 + 1));
      const at::Tensor x = pool.index_select(0, at::randperm(pool.numel()).slice(0, 0, n));
      ASSERT_EQ(std::get<0>(at::_unique(x)).numel(), n) << "sample has ties";
      const auto codec = make_codec("sortquant:" + std::to_string(q) + ":" + std::to_string(s));
      const Packet p = encode(*codec, x);
      const auto ref = baseline::sortquant_encode(x, q, s);
      const auto codes = codes_of(p);
      const at::Tensor ours = at::from_blob(const_cast<uint16_t*>(codes.data()), {n}, at::kShort)
                                  .to(at::kInt)
                                  .bitwise_and(0xFFFF);
      EXPECT_TRUE(at::equal(ours, ref.codes)) << q << ":" << s << " n " << n;
      const std::vector<float> table = table_of(p);
      const at::Tensor ours_table =
          at::from_blob(const_cast<float*>(table.data()), {1 << s, 2}).clone();
      EXPECT_TRUE(at::equal(ours_table, ref.table)) << q << ":" << s << " n " << n;
      EXPECT_TRUE(at::equal(decode(p), baseline::sortquant_decode(ref, q)));
    }
  }
}

TEST(SortQuantTest, WithManyTiesEveryValueStaysWithinItsGroupsHalfStep) {
  for (const char* dist : {"ties", "relu", "gaussian", "heavy", "uniform"}) {
    for (const char* name : {"sortquant:8", "sortquant:4", "sortquant:2:3", "sortquant:12"}) {
      const at::Tensor x = sample(dist, 30011, 3);
      const auto codec = make_codec(name);
      const Packet p = encode(*codec, x);
      const at::Tensor y = decode(p);
      const auto table = table_of(p);
      const auto codes = codes_of(p);
      const int q = codec->spec().bits - codec->spec().split_bits;
      const float* xs = x.data_ptr<float>();
      const float* ys = y.data_ptr<float>();
      for (int64_t i = 0; i < x.numel(); ++i) {
        const int g = codes[static_cast<size_t>(i)] >> q;
        const float lo = table[static_cast<size_t>(2 * g)],
                    step = table[static_cast<size_t>(2 * g + 1)];
        ASSERT_GE(xs[i], lo) << name << " " << dist << " element " << i;
        ASSERT_LE(std::abs(xs[i] - ys[i]), step / 2 + 1e-6f * std::abs(xs[i]) + 1e-7f)
            << name << " " << dist << " element " << i;
      }
    }
  }
}

TEST(SortQuantTest, GroupsHoldEqualCountsUpToTies) {
  const at::Tensor x = at::randn({4000});
  const Packet p = encode(*make_codec("sortquant:6:2"), x);
  std::vector<int> per_group(4, 0);
  for (uint16_t c : codes_of(p))
    ++per_group[c >> 6];
  EXPECT_EQ(per_group, (std::vector<int>{1000, 1000, 1000, 1000}));
}

TEST(KMeansTest, EveryValueDecodesToItsNearestCentroid) {
  for (const char* name : {"kmeans:1", "kmeans:2", "kmeans:4:20", "kmeans:6", "kmeans:8:5"}) {
    for (const char* dist : {"gaussian", "relu", "ties", "heavy"}) {
      const at::Tensor x = sample(dist, 20011, 5);
      const Packet p = encode(*make_codec(name), x);
      const at::Tensor y = decode(p);
      const auto c = table_of(p);
      const at::Tensor centroids =
          at::from_blob(const_cast<float*>(c.data()), {static_cast<int64_t>(c.size())});
      const at::Tensor nearest = (x.unsqueeze(1) - centroids.unsqueeze(0)).abs().amin(1);
      EXPECT_TRUE(at::equal((x - y).abs(), nearest)) << name << " " << dist;
    }
  }
}

TEST(KMeansTest, GaussianMseIsWithinFivePercentOfLloydMax) {
  at::manual_seed(11);
  const at::Tensor x = at::randn({1 << 20});
  const std::vector<std::pair<int, double>> bounds{{2, 0.1175}, {3, 0.03454}, {4, 0.009497}};
  for (auto [bits, bound] : bounds) {
    const at::Tensor y = decode(encode(*make_codec("kmeans:" + std::to_string(bits)), x));
    const double mse_over_var = ((x - y).pow(2).mean() / x.var()).item<double>();
    EXPECT_LE(mse_over_var, 1.05 * bound) << bits << " bits";
    EXPECT_GE(mse_over_var, 0.97 * bound) << bits << " bits: better than optimal is a bug";
  }
}

TEST(KMeansTest, NoWorseThanPlainLloydWithTheSameIterations) {
  at::manual_seed(12);
  const at::Tensor x = at::randn({200000});
  const at::Tensor ours = decode(encode(*make_codec("kmeans:3:20"), x));
  const auto ref = baseline::kmeans(x, 8, 20);
  const double mse_ours = (x - ours).pow(2).mean().item<double>();
  const double mse_ref = (x - baseline::kmeans_decode(ref, x.sizes())).pow(2).mean().item<double>();
  EXPECT_LE(mse_ours, mse_ref * 1.002);
}

TEST(CastTest, HalfPrecisionCodecsRoundLikeACast) {
  const at::Tensor x = at::randn({5000}) * 100;
  EXPECT_TRUE(at::equal(decode(encode(*make_codec("fp16"), x)), x.to(at::kHalf).to(at::kFloat)));
  EXPECT_TRUE(
      at::equal(decode(encode(*make_codec("bf16"), x)), x.to(at::kBFloat16).to(at::kFloat)));
  EXPECT_TRUE(at::equal(decode(encode(*make_codec("none"), x)), x));
}

TEST(CodecTest, ShapesDtypesEmptyTinyAndConstantTensors) {
  for (const char* name : {"none", "fp16", "bf16", "uniform:3", "sortquant:8", "sortquant:2:4",
                           "kmeans:3", "kmeans:4:20"}) {
    const auto codec = make_codec(name);
    for (auto dtype : {at::kFloat, at::kDouble, at::kHalf, at::kBFloat16}) {
      const at::Tensor x = at::randn({2, 3, 5}).to(dtype).transpose(0, 2);  // non-contiguous
      const at::Tensor y = decode(encode(*codec, x));
      EXPECT_EQ(y.scalar_type(), dtype) << name;
      EXPECT_EQ(y.sizes(), x.sizes()) << name;
    }
    for (int64_t n : {0, 1, 2, 3, 5}) {  // fewer values than groups or centroids
      const at::Tensor x = at::randn({n});
      const at::Tensor y = decode(encode(*codec, x));
      ASSERT_EQ(y.numel(), n) << name;
      if (std::string(name).rfind("sortquant", 0) == 0 ||
          std::string(name).rfind("kmeans", 0) == 0) {
        EXPECT_TRUE(at::allclose(x, y, 0, 1e-6)) << name << " n " << n << ": few values are exact";
      }
    }
    const at::Tensor constant = at::full({100}, 3.25f);
    EXPECT_TRUE(at::equal(decode(encode(*codec, constant)), constant)) << name;
    const at::Tensor scalar = at::scalar_tensor(2.5, at::kFloat);
    EXPECT_EQ(decode(encode(*codec, scalar)).dim(), 0) << name;
  }
}

// Found by fuzzing (tests/fuzz): an empty shape whose other dimensions are huge holds no
// values but has strides no int64 holds; LibTorch refused it with an exception of its own.
TEST(CodecTest, AnEmptyShapeWithHugeDimensionsIsACorruptPacket) {
  Packet p = encode(*make_codec("none"), at::empty({0, 1, 1, 1}));
  for (int d = 1; d < 4; ++d) {
    const int64_t huge = int64_t{1} << 39;
    std::memcpy(p.data() + PacketHeader::Offset::kShape + 8 * d, &huge, 8);
  }
  try {
    decode(p);
    ADD_FAILURE() << "decoded";
  } catch (const CorruptPacket& e) {
    EXPECT_NE(std::string(e.what()).find("shape too large"), std::string::npos) << e.what();
  }
}

TEST(CodecTest, NanAndInfAreRejectedWithAClearError) {
  for (const char* name : {"none", "fp16", "uniform:8", "sortquant:8", "kmeans:2"}) {
    for (float bad : {NAN, INFINITY, -INFINITY}) {
      at::Tensor x = at::randn({100});
      x[37] = bad;
      try {
        encode(*make_codec(name), x);
        ADD_FAILURE() << name << " accepted " << bad;
      } catch (const std::invalid_argument& e) {
        EXPECT_NE(std::string(e.what()).find("NaN or Inf"), std::string::npos);
      }
    }
  }
}

TEST(CodecTest, CompressionRatioCountsHeaderAndTables) {
  const int64_t n = 1 << 20;
  const at::Tensor x = at::randn({n});
  const size_t header = 32 + 8;
  const std::vector<std::tuple<std::string, size_t, int>> cases{{"sortquant:8", 4 * 8, 8},
                                                                {"sortquant:12", 8 * 8, 12},
                                                                {"uniform:4", 8, 4},
                                                                {"kmeans:4", 16 * 4, 4}};
  for (const auto& [name, table, bits] : cases) {
    const Packet p = encode(*make_codec(name), x);
    EXPECT_EQ(p.size(), header + table + static_cast<size_t>(n * bits / 8)) << name;
    EXPECT_NEAR(compression_ratio(p.size(), n),
                bits / 32.0 + static_cast<double>(header + table) / (4.0 * n), 1e-12);
  }
}

TEST(ErrorFeedbackTest, WhatIsDroppedComesBackNextStep) {
  ErrorFeedback ef;
  const auto codec = make_codec("uniform:2");
  at::Tensor sent_sum = at::zeros({1000});
  at::Tensor input_sum = at::zeros({1000});
  for (int step = 0; step < 50; ++step) {
    const at::Tensor g = at::randn({1000});
    at::Tensor decoded;
    ef.encode(*codec, g, decoded);
    sent_sum += decoded;
    input_sum += g;
    // Invariant: everything the inputs held was either sent or is still in the residual.
    EXPECT_TRUE(at::allclose(sent_sum + ef.residual(), input_sum, 1e-4, 1e-4)) << step;
  }
  EXPECT_LT(ef.residual().abs().max().item<float>(), 10.f);  // bounded, not accumulating
}

}  // namespace
}  // namespace dtrain::compress
