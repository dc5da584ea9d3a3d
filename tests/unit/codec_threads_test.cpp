// Codecs on threads (compress/chunks.h): packets and decoded values must be the very bytes
// one thread makes, whatever the thread count and wherever the chunk boundaries fall;
// errors raised on another thread surface on the caller's.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <cstring>
#include <stdexcept>

#include "dtrain/compress/chunks.h"
#include "dtrain/compress/codec.h"
#include "dtrain/compress/codecs.h"

namespace dtrain::compress {
namespace {

TEST(CodecChunksTest, ChunksCoverTheValuesInWholeBlocks) {
  for (const int64_t n : {int64_t{0}, int64_t{5}, kMinEncodeChunk * 2 - 1, kMinEncodeChunk * 2,
                          int64_t{3'000'123}, int64_t{16'777'223}}) {
    for (int threads = 1; threads <= 5; ++threads) {
      const int chunks = chunk_count(n, threads, kMinEncodeChunk);
      ASSERT_GE(chunks, 1);
      ASSERT_LE(chunks, threads);
      EXPECT_EQ(chunks, std::max<int64_t>(1, std::min<int64_t>(threads, n / kMinEncodeChunk)))
          << n << " values, " << threads << " threads";
      int64_t next = 0;
      for (int c = 0; c < chunks; ++c) {
        const Chunk chunk = chunk_of(n, chunks, c);
        EXPECT_EQ(chunk.index, c);
        EXPECT_EQ(chunk.begin, next);
        EXPECT_EQ(chunk.begin % kCodeBlock, 0);  // starts on a byte of any packed stream
        if (chunks > 1) {
          EXPECT_GT(chunk.end - chunk.begin, kMinEncodeChunk - kCodeBlock);
        }
        next = chunk.end;
      }
      EXPECT_EQ(next, n);
    }
  }
  EXPECT_THROW(chunk_count(100, 0, kMinEncodeChunk), std::invalid_argument);
}

TEST(CodecChunksTest, EveryChunkRunsAndAFailureReachesTheCaller) {
  std::atomic<int> ran{0};
  EXPECT_THROW(for_each_chunk(int64_t{1} << 22, 4,
                              [&](const Chunk& c) {
                                ++ran;
                                if (c.index == 2) throw std::runtime_error("chunk 2");
                              }),
               std::runtime_error);
  EXPECT_EQ(ran.load(), 4);
}

at::Tensor sample(const std::string& dist, int64_t n) {
  at::manual_seed(7);
  if (dist == "gaussian") return at::randn({n});
  if (dist == "relu") return at::relu(at::randn({n}));  // a wanted bucket crowded with zeros
  if (dist == "signed-zeros") {  // +0 is the minimum of the first chunks, -0 of the last
    at::Tensor x = at::relu(at::randn({n}));
    at::Tensor tail = x.narrow(0, n - n / 4, n / 4);
    tail.copy_(at::where(tail == 0, at::full({}, -0.f), tail));
    return x;
  }
  if (dist == "near-one") {  // half the values in one bucket of distinct values: crowded
    at::Tensor x = at::randn({n});
    x.index_put_({at::indexing::Slice(0, at::indexing::None, 2)},
                 1.f + at::rand({(n + 1) / 2}) / 256.f);
    return x;
  }
  throw std::invalid_argument(dist);
}

TEST(CodecThreadsTest, PacketsAndValuesAreTheSameOnAnyThreadCount) {
  // 3M + 123 values: up to five encode chunks, the last block short.
  const int64_t n = 3'000'123;
  for (const std::string dist : {"gaussian", "relu", "near-one", "signed-zeros"}) {
    const at::Tensor x = sample(dist, n).reshape({3, -1});
    for (const std::string name : {"sortquant:8", "sortquant:4", "sortquant:2:6", "uniform:8",
                                   "uniform:3", "kmeans:4:10", "fp16", "none"}) {
      const auto codec = make_codec(name);
      const Packet one = encode(*codec, x, 1);
      const at::Tensor decoded = decode(one, 1);
      for (const int threads : {2, 3, 5}) {
        SCOPED_TRACE(dist + " " + name + " on " + std::to_string(threads) + " threads");
        EXPECT_EQ(encode(*codec, x, threads), one);
        const at::Tensor again = decode(one, threads);
        ASSERT_EQ(again.sizes(), decoded.sizes());
        EXPECT_EQ(std::memcmp(again.data_ptr<float>(), decoded.data_ptr<float>(),
                              static_cast<size_t>(decoded.numel()) * 4),
                  0);
      }
    }
  }
}

TEST(CodecThreadsTest, NonFiniteValuesInAnyChunkAndBadCountsAreErrors) {
  at::Tensor x = sample("gaussian", int64_t{1} << 22);
  x[(int64_t{1} << 22) - 9] = std::nanf("");  // in the last chunk, not the caller's
  for (const std::string name : {"sortquant:8", "uniform:8", "kmeans:4:10", "fp16"}) {
    SCOPED_TRACE(name);
    EXPECT_THROW(encode(*make_codec(name), x, 4), std::invalid_argument);
  }
  const auto codec = make_codec("sortquant:8");
  EXPECT_THROW(encode(*codec, sample("gaussian", 100), 0), std::invalid_argument);
  EXPECT_THROW(decode(encode(*codec, sample("gaussian", 100)), -1), std::invalid_argument);
}

}  // namespace
}  // namespace dtrain::compress
