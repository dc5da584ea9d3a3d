// Internal: one tensor's coding split over threads. A large tensor is cut into chunks of
// whole code blocks (kCodeBlock values, so every chunk starts on a byte of the packed
// stream), each at least a minimum long; the calling thread codes the first chunk and
// one short-lived thread each of the others. Callers merge per-chunk results in chunk
// order, so packets and decoded values never depend on the thread count.
#pragma once

#include <cstdint>
#include <functional>

namespace dtrain::compress {

// Values per thread below which starting a thread costs about what it saves (measured:
// docs/results.md, "Codecs"). Decoding costs ~8x less per value than encoding.
constexpr int64_t kMinEncodeChunk = int64_t{1} << 19;
constexpr int64_t kMinDecodeChunk = int64_t{1} << 20;

struct Chunk {
  int index;
  int64_t begin, end;  // values [begin, end)
};

// Throws std::invalid_argument naming the count if threads < 1.
void require_threads(int threads);

// How many chunks of at least min_chunk values n values are cut into with at most
// `threads` threads (>= 1). Throws as require_threads() does.
int chunk_count(int64_t n, int threads, int64_t min_chunk);

// The chunk `index` of `chunks` over n values.
Chunk chunk_of(int64_t n, int chunks, int index);

// Runs fn on every chunk, chunk 0 on the calling thread, and returns once all have ended.
// The first exception thrown by any chunk is rethrown here, after every thread has joined.
void for_each_chunk(int64_t n, int chunks, const std::function<void(const Chunk&)>& fn);

// Runs block(start, count) over [0, n) in steps of kCodeBlock values (the last may be
// shorter), the chunks in parallel: the same blocks as one thread's loop.
void for_each_block(int64_t n, int chunks,
                    const std::function<void(int64_t start, int64_t count)>& block);

}  // namespace dtrain::compress
