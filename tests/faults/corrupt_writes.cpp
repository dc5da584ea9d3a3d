// Fault injection for the end-to-end tests: an LD_PRELOAD library that flips one bit in
// what this process writes to a TCP connection, as a faulty NIC, cable or middlebox would,
// so the receiver sees corrupted bytes on a real connection.
//
// DTRAIN_CORRUPT_AFTER_BYTES=N: the first socket write of a large piece (>= 4 KiB, a
// message's payload rather than a transport header) after N bytes have been written has
// one bit flipped in a private copy (the sender's own buffer stays intact). Once.
#include <dlfcn.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <vector>

namespace {

constexpr size_t kLargePiece = 4096;

using WritevFn = ssize_t (*)(int, const struct iovec*, int);

long long threshold() {
  static const long long n = [] {
    const char* v = std::getenv("DTRAIN_CORRUPT_AFTER_BYTES");
    return v != nullptr ? std::atoll(v) : -1;
  }();
  return n;
}

std::atomic<long long> written{0};
std::atomic<bool> done{false};

bool is_socket(int fd) {
  struct stat st {};
  return fstat(fd, &st) == 0 && S_ISSOCK(st.st_mode);
}

}  // namespace

extern "C" ssize_t writev(int fd, const struct iovec* iov, int count) {
  static const auto real = reinterpret_cast<WritevFn>(dlsym(RTLD_NEXT, "writev"));
  if (threshold() < 0 || done.load() || !is_socket(fd)) return real(fd, iov, count);
  size_t total = 0;
  int large = -1;
  for (int i = 0; i < count; ++i) {
    total += iov[i].iov_len;
    if (large < 0 && iov[i].iov_len >= kLargePiece) large = i;
  }
  if (large < 0 || written.load() < threshold() || done.exchange(true)) {
    written += static_cast<long long>(total);
    return real(fd, iov, count);
  }
  std::vector<struct iovec> copy(iov, iov + count);
  const auto* original = static_cast<const unsigned char*>(iov[large].iov_base);
  std::vector<unsigned char> bytes(original, original + iov[large].iov_len);
  constexpr size_t kOffset = 64;  // early in the piece, so even a short write carries it
  bytes[kOffset] ^= 0x10;
  copy[static_cast<size_t>(large)].iov_base = bytes.data();
  const ssize_t n = real(fd, copy.data(), count);
  size_t before = 0;
  for (int i = 0; i < large; ++i)
    before += iov[i].iov_len;
  // Too short a write to carry the flipped bit: the caller resends the rest from its own
  // intact buffer, so try again on a later write.
  if (n < 0 || static_cast<size_t>(n) <= before + kOffset) done = false;
  if (n > 0) written += n;
  return n;
}
