// The randomized Hadamard rotation (compress/hadamard.h) against a float64 matrix product,
// and the rot codecs (compress/rotated.cpp): names, packets, errors on outliers, corruption.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "../support/codec_names.h"
#include "dtrain/compress/codec.h"
#include "dtrain/compress/hadamard.h"
#include "dtrain/compress/packet_header.h"

namespace dtrain::compress {
namespace {

// The Walsh-Hadamard matrix entry (i, j) is (-1)^popcount(i & j).
double hadamard_entry(int64_t i, int64_t j) {
  return __builtin_popcountll(static_cast<unsigned long long>(i & j)) % 2 ? -1.0 : 1.0;
}

TEST(HadamardTest, RotateIsTheOrthonormalMatrixProductAndUnrotateItsInverse) {
  for (const int tile_log2 : {1, 3, 4, 8}) {
    Rotation r;
    r.tile_log2 = tile_log2;
    r.seed = 12345u + static_cast<uint32_t>(tile_log2);
    const int64_t tile = r.tile(), n = 3 * tile;
    at::manual_seed(tile_log2);
    const at::Tensor x = at::randn({n});
    at::Tensor y = x.clone();
    rotate(y.data_ptr<float>(), n, r);
    const std::vector<float> signs = r.signs();
    int flips = 0;
    for (const float s : signs)
      flips += s < 0;
    if (tile >= 16) {
      EXPECT_GT(flips, 0) << "no sign flipped";
      EXPECT_LT(flips, tile) << "every sign flipped";
    }
    const auto* xs = x.data_ptr<float>();
    const auto* ys = y.data_ptr<float>();
    for (int64_t t = 0; t < n; t += tile) {
      for (int64_t i = 0; i < tile; ++i) {
        double want = 0;
        for (int64_t j = 0; j < tile; ++j)
          want += hadamard_entry(i, j) * signs[static_cast<size_t>(j)] * xs[t + j];
        want /= std::sqrt(static_cast<double>(tile));
        ASSERT_NEAR(ys[t + i], want, 1e-5 * std::sqrt(static_cast<double>(tile)))
            << "tile " << tile << " value " << t + i;
      }
    }
    EXPECT_NEAR(y.norm().item<double>(), x.norm().item<double>(), 1e-5 * x.norm().item<double>());
    unrotate(y.data_ptr<float>(), n, r);
    EXPECT_LT((y - x).abs().max().item<float>(), 1e-5f);
    // The tensor operations give the CPU kernel's bits, both ways.
    at::Tensor by_cpu = x.clone();
    rotate(by_cpu.data_ptr<float>(), n, r);
    EXPECT_TRUE(at::equal(rotate(x, r), by_cpu));
    at::Tensor back_cpu = by_cpu.clone();
    unrotate(back_cpu.data_ptr<float>(), n, r);
    EXPECT_TRUE(at::equal(unrotate(by_cpu, r), back_cpu));
  }
}

TEST(HadamardTest, ThreadsDoNotChangeTheBits) {
  Rotation r;
  r.seed = 7;
  const int64_t n = int64_t{1} << 21;
  at::manual_seed(3);
  const at::Tensor x = at::randn({n});
  at::Tensor one = x.clone(), four = x.clone();
  rotate(one.data_ptr<float>(), n, r, 1);
  rotate(four.data_ptr<float>(), n, r, 4);
  EXPECT_TRUE(at::equal(one, four));
  unrotate(one.data_ptr<float>(), n, r, 1);
  unrotate(four.data_ptr<float>(), n, r, 4);
  EXPECT_TRUE(at::equal(one, four));
}

TEST(RotatedCodecTest, NamesParseToTheirCanonicalFormAndBadOnesAreClearErrors) {
  const CodecSpec s = parse_codec("rot:uniform:4");
  EXPECT_EQ(s.id, CodecId::kRotated);
  EXPECT_EQ(s.inner, CodecId::kUniform);
  EXPECT_EQ(s.bits, 4);
  EXPECT_EQ(s.tile_log2, 8);
  EXPECT_EQ(to_string(s), "rot:256:uniform:4");
  EXPECT_EQ(to_string(parse_codec("rot:64:sortquant:4")), "rot:64:sortquant:3:1");
  EXPECT_EQ(parse_codec("rot:32:kmeans:2:10").iters, 10);
  const auto message = dtrain::testing::parse_error;
  EXPECT_EQ(message("rot"), "codec 'rot': rot needs a value codec: rot[:T]:CODEC");
  EXPECT_EQ(message("rot:256"), "codec 'rot:256': rot needs a value codec: rot[:T]:CODEC");
  EXPECT_EQ(message("rot:100:uniform:4"),
            "codec 'rot:100:uniform:4': the tile must be a power of two from 2 to 65536");
  EXPECT_EQ(message("rot:131072:uniform:4"),
            "codec 'rot:131072:uniform:4': the tile must be a power of two from 2 to 65536");
  for (const char* name : {"rot:fp16", "rot:none", "rot:rot:uniform:4"})
    EXPECT_NE(message(name).find("rot's value codec must be tile, uniform, sortquant or kmeans"),
              std::string::npos)
        << name << ": " << message(name);
  EXPECT_NE(message("rot:uniform:17").find("bits must be 1..16"), std::string::npos);
}

// Activations with a few channels far larger than the rest (the outliers low-bit boundaries
// lose accuracy on): every 64th value is 50 times the others' scale.
at::Tensor with_outliers(int64_t n) {
  at::manual_seed(5);
  at::Tensor x = at::randn({n});
  x.slice(0, 0, n, 64).mul_(50.f);
  return x;
}

double relative_mse(const at::Tensor& back, const at::Tensor& x) {
  return (back - x).pow(2).mean().item<double>() / x.pow(2).mean().item<double>();
}

TEST(RotatedCodecTest, OutliersCostARotatedCodeFarLessThanAPlainOne) {
  const at::Tensor x = with_outliers(1 << 16).reshape({256, 256});
  for (const std::string value_codec : {"uniform:2", "uniform:3", "uniform:4", "sortquant:4"}) {
    SCOPED_TRACE(value_codec);
    const double plain = relative_mse(decode(encode(*make_codec(value_codec), x)), x);
    const Packet packet = encode(*make_codec("rot:" + value_codec), x);
    const at::Tensor back = decode(packet);
    EXPECT_EQ(back.sizes(), x.sizes());
    const double rotated = relative_mse(back, x);
    // sortquant's groups already give the outliers ranges of their own: less to gain.
    const double gain = value_codec.rfind("uniform", 0) == 0 ? 3 : 2;
    EXPECT_LT(rotated, plain / gain) << "plain " << plain << " rotated " << rotated;
    // The rotation adds only its 8-byte table head: bits per value stay the value codec's.
    const double plain_bytes = static_cast<double>(encode(*make_codec(value_codec), x).size());
    EXPECT_LT(static_cast<double>(packet.size()), plain_bytes * 1.01 + 16);
  }
}

// Rotated, any tile of values is close to Gaussian, and tile:B's clipped levels then lose
// little more than the optimal (Lloyd-Max) B-bit quantizer of a Gaussian: 0.1175, 0.03454
// and 0.009497 of the energy at 2, 3 and 4 bits (Max 1960); within 25 % of it here.
TEST(RotatedCodecTest, RotatedTilesLoseCloseToTheLloydMaxBoundOnAnyDistribution) {
  const int64_t n = 1 << 18;
  at::manual_seed(9);
  const std::vector<std::pair<std::string, at::Tensor>> inputs = {
      {"gaussian", at::randn({n})},
      {"student-t3", at::randn({n}) / (at::randn({3, n}).pow(2).sum(0) / 3).sqrt()},
      {"outliers", with_outliers(n)},
      {"relu", at::relu(at::randn({n}))},
      {"channel scales", at::relu(at::randn({64, 4096}) * at::randn({64, 1}).exp()).view({-1})}};
  const std::pair<int, double> bounds[] = {{2, 0.1175}, {3, 0.03454}, {4, 0.009497}};
  for (const auto& [dist, x] : inputs) {
    const double energy = x.pow(2).mean().item<double>();
    for (const auto& [bits, lloyd_max] : bounds) {
      const std::string name = "rot:tile:" + std::to_string(bits);
      const at::Tensor back = decode(encode(*make_codec(name), x));
      const double loss = (back - x).pow(2).mean().item<double>() / energy;
      EXPECT_LT(loss, lloyd_max * 1.25) << name << " on " << dist;
      // No quantizer of a Gaussian beats Lloyd-Max.
      if (dist == "gaussian") {
        EXPECT_GT(loss, lloyd_max) << name;
      }
      // Without the rotation the tails stretch the tiles' ranges: the rotation is what pays.
      if (dist == "student-t3" || dist == "outliers") {
        const at::Tensor plain = decode(encode(*make_codec("tile:" + std::to_string(bits)), x));
        EXPECT_GT((plain - x).pow(2).mean().item<double>() / energy, 2 * loss) << dist;
      }
    }
  }
}

// ReLU outputs have a mean near their spread: centered first, a rotated code's error is a
// fraction of the variance, not of the (larger) mean square.
TEST(RotatedCodecTest, TheCenterIsTheMeanAndTravelsInTheTable) {
  at::manual_seed(4);
  const at::Tensor x = at::relu(at::randn({5000})) + 3.f;
  const Packet packet = encode(*make_codec("rot:tile:3"), x);
  const size_t table = inspect(packet.data(), packet.size()).header_bytes;
  float center;
  std::memcpy(&center, packet.data() + table + 4, 4);
  EXPECT_NEAR(center, x.to(at::kDouble).mean().item<double>(), 1e-6);
  const double variance = x.var().item<double>();
  EXPECT_LT((decode(packet) - x).pow(2).mean().item<double>() / variance, 0.03454 * 1.25);
}

TEST(RotatedCodecTest, PaddedTailsShapesAndDtypesRoundTrip) {
  for (const int64_t n : {int64_t{0}, int64_t{1}, int64_t{255}, int64_t{257}, int64_t{1000}}) {
    at::manual_seed(n);
    const at::Tensor x = at::randn({n}).to(at::kDouble);
    const at::Tensor back = decode(encode(*make_codec("rot:16:uniform:8"), x));
    EXPECT_EQ(back.scalar_type(), at::kDouble);
    ASSERT_EQ(back.numel(), n);
    if (n > 1) {
      EXPECT_LT(relative_mse(back, x), 1e-3) << n;
    }
  }
}

TEST(RotatedCodecTest, CorruptHeadersAndTablesAreCorruptPackets) {
  const at::Tensor x = at::randn({600});
  const Packet good = encode(*make_codec("rot:uniform:4"), x);
  const auto rejects = [&](size_t at, uint8_t value) {
    Packet p = good;
    p[at] = value;
    try {
      decode(p);
    } catch (const CorruptPacket&) {
      return true;
    }
    return false;
  };
  using Off = PacketHeader::Offset;
  EXPECT_TRUE(rejects(Off::kInner, 0));  // rot over nothing
  EXPECT_TRUE(rejects(Off::kInner, 6));  // rot over rot
  EXPECT_TRUE(rejects(Off::kTileLog2, 0));
  EXPECT_TRUE(rejects(Off::kTileLog2, 17));
  EXPECT_TRUE(rejects(Off::kTileLog2, 247));  // named in the error before it is checked
  EXPECT_TRUE(rejects(Off::kTileLog2, 4));    // the table and payload sizes no longer match
  const size_t table = inspect(good.data(), good.size()).header_bytes;
  Packet nan_center = good;
  const float nan = std::nanf("");
  std::memcpy(nan_center.data() + table + 4, &nan, 4);
  EXPECT_THROW(decode(nan_center), CorruptPacket);
  // A plain codec's packet naming an inner codec or a tile.
  Packet plain = encode(*make_codec("uniform:4"), x);
  plain[Off::kInner] = static_cast<uint8_t>(CodecId::kUniform);
  EXPECT_THROW(inspect(plain.data(), plain.size()), CorruptPacket);
  plain[Off::kInner] = 0;
  plain[Off::kTileLog2] = 8;
  EXPECT_THROW(inspect(plain.data(), plain.size()), CorruptPacket);
}

TEST(RotatedCodecTest, NanAndInfAreRejectedWithAClearError) {
  at::Tensor x = at::randn({300});
  x[17] = std::nanf("");
  try {
    encode(*make_codec("rot:uniform:4"), x);
    FAIL() << "took a NaN";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("NaN or Inf"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace dtrain::compress
