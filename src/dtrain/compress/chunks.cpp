#include "dtrain/compress/chunks.h"

#include <algorithm>
#include <exception>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "dtrain/compress/codecs.h"  // kCodeBlock

namespace dtrain::compress {
namespace {

struct Joiner {
  std::vector<std::thread> threads;
  ~Joiner() {
    for (auto& t : threads)
      t.join();
  }
};

}  // namespace

void require_threads(int threads) {
  if (threads < 1) {
    throw std::invalid_argument("codec threads must be >= 1, got " + std::to_string(threads));
  }
}

int chunk_count(int64_t n, int threads, int64_t min_chunk) {
  require_threads(threads);
  const int64_t most = n / min_chunk;
  return static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(threads, most)));
}

Chunk chunk_of(int64_t n, int chunks, int index) {
  const auto boundary = [&](int c) {
    if (c >= chunks) return n;
    const int64_t even_share = n / chunks * c + n % chunks * c / chunks;
    return even_share / kCodeBlock * kCodeBlock;
  };
  return {index, boundary(index), boundary(index + 1)};
}

void for_each_chunk(int64_t n, int chunks, const std::function<void(const Chunk&)>& fn) {
  if (chunks <= 1) {
    fn({0, 0, n});
    return;
  }
  std::vector<std::exception_ptr> failures(static_cast<size_t>(chunks));
  const auto run = [&](int c) {
    try {
      fn(chunk_of(n, chunks, c));
    } catch (...) {
      failures[static_cast<size_t>(c)] = std::current_exception();
    }
  };
  {
    Joiner others;  // joins even if starting a thread throws
    for (int c = 1; c < chunks; ++c)
      others.threads.emplace_back(run, c);
    run(0);
  }
  for (const auto& failure : failures) {
    if (failure) std::rethrow_exception(failure);
  }
}

void for_each_block(int64_t n, int chunks,
                    const std::function<void(int64_t start, int64_t count)>& block) {
  for_each_chunk(n, chunks, [&](const Chunk& c) {
    for (int64_t start = c.begin; start < c.end; start += kCodeBlock)
      block(start, std::min(kCodeBlock, c.end - start));
  });
}

}  // namespace dtrain::compress
