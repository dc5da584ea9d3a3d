// Thousands of random mutations of valid packets: decode must either succeed or throw
// CorruptPacket; never crash, hang or read out of bounds. Built twice: in unit_tests and,
// with AddressSanitizer, as codec_fuzz_asan (see CMakeLists.txt).
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <random>

#include "dtrain/compress/codec.h"

namespace dtrain::compress {
namespace {

TEST(CodecFuzzTest, MutatedPacketsDecodeOrThrowCorruptPacket) {
  std::mt19937_64 rng(2026);
  const std::vector<std::string> names{"none",
                                       "fp16",
                                       "bf16",
                                       "uniform:5",
                                       "uniform:16",
                                       "sortquant:8",
                                       "sortquant:3:3",
                                       "kmeans:3",
                                       "kmeans:8:3",
                                       "rot:uniform:3",
                                       "rot:16:sortquant:4",
                                       "rot:8:kmeans:2",
                                       "tile:3",
                                       "rot:tile:2"};
  int decoded = 0, rejected = 0;
  for (const auto& name : names) {
    const auto codec = make_codec(name);
    for (const auto& shape : std::vector<std::vector<int64_t>>{{0}, {1}, {7, 3}, {2, 2, 33}}) {
      const Packet valid = encode(*codec, at::randn(shape));
      for (int trial = 0; trial < 400; ++trial) {
        Packet p = valid;
        switch (rng() % 5) {
          case 0:  // flip random bits
            for (int k = 0, flips = 1 + static_cast<int>(rng() % 4); k < flips && !p.empty(); ++k) {
              p[rng() % p.size()] ^= static_cast<uint8_t>(1u << (rng() % 8));
            }
            break;
          case 1:
            p.resize(rng() % (p.size() + 1));
            break;  // truncate
          case 2:
            p.resize(p.size() + 1 + rng() % 16, static_cast<uint8_t>(rng()));
            break;
          case 3:  // overwrite a header byte with anything
            if (!p.empty()) p[rng() % std::min<size_t>(p.size(), 48)] = static_cast<uint8_t>(rng());
            break;
          case 4:  // random bytes of random length, with a valid magic half the time
            p.assign(rng() % 96, 0);
            for (auto& b : p)
              b = static_cast<uint8_t>(rng());
            if (p.size() >= 4 && rng() % 2) std::memcpy(p.data(), valid.data(), 4);
            break;
        }
        try {
          const at::Tensor t = decode(p);
          ++decoded;
          EXPECT_GE(t.numel(), 0);
        } catch (const CorruptPacket&) {
          ++rejected;
        }
      }
    }
  }
  EXPECT_GT(rejected, 1000);
  EXPECT_GT(decoded, 100);  // payload bit flips are legal packets with other values
}

}  // namespace
}  // namespace dtrain::compress
