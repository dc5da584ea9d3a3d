#include "dtrain/base/crc32c.h"

#include <array>
#include <cstring>
#include <stdexcept>
#include <string>

#include "dtrain/base/crc32c_fold.h"

namespace dtrain {
namespace {

constexpr uint32_t kPolynomial = 0x82F63B78u;  // reflected

// Tables for eight bytes at a time: kTables[k][b] is the register after byte b followed by
// k zero bytes.
using Tables = std::array<std::array<uint32_t, 256>, 8>;
Tables make_tables() {
  Tables t{};
  for (uint32_t b = 0; b < 256; ++b) {
    uint32_t r = b;
    for (int i = 0; i < 8; ++i)
      r = (r & 1) ? (r >> 1) ^ kPolynomial : r >> 1;
    t[0][b] = r;
  }
  for (size_t k = 1; k < 8; ++k)
    for (uint32_t b = 0; b < 256; ++b)
      t[k][b] = (t[k - 1][b] >> 8) ^ t[0][t[k - 1][b] & 0xFF];
  return t;
}
const Tables kTables = make_tables();

uint64_t load64(const unsigned char* p) {
  uint64_t v;
  std::memcpy(&v, p, 8);
  return v;  // little-endian hosts only (x86-64, aarch64)
}

// The register (no pre/post inversion) after `n` bytes.
uint32_t portable_register(uint32_t r, const unsigned char* p, size_t n) {
  for (; n >= 8; n -= 8, p += 8) {
    const uint64_t v = load64(p) ^ r;
    r = kTables[7][v & 0xFF] ^ kTables[6][(v >> 8) & 0xFF] ^ kTables[5][(v >> 16) & 0xFF] ^
        kTables[4][(v >> 24) & 0xFF] ^ kTables[3][(v >> 32) & 0xFF] ^ kTables[2][(v >> 40) & 0xFF] ^
        kTables[1][(v >> 48) & 0xFF] ^ kTables[0][v >> 56];
  }
  for (; n > 0; --n, ++p)
    r = (r >> 8) ^ kTables[0][(r ^ *p) & 0xFF];
  return r;
}

// a * b modulo the polynomial, both in reflected order (bit 31 is x^0).
uint32_t multiply(uint32_t a, uint32_t b) {
  uint32_t product = 0;
  for (uint32_t bit = 1u << 31; bit != 0; bit >>= 1) {
    if (a & bit) product ^= b;
    b = (b & 1) ? (b >> 1) ^ kPolynomial : b >> 1;  // b *= x
  }
  return product;
}

// x^bits modulo the polynomial by squaring: O(log bits) products. x^(8n) is what appending
// n zero bytes multiplies a register by.
uint32_t x_power(uint64_t bits) {
  uint32_t result = 1u << 31;  // x^0
  uint32_t power = 1u << 30;   // x^1
  for (; bits > 0; bits >>= 1) {
    if (bits & 1) result = multiply(result, power);
    power = multiply(power, power);
  }
  return result;
}

#if defined(__x86_64__)
// Three streams of kLane bytes run at once (the instruction's latency is three cycles,
// its throughput one), then are joined: reg(A B C) = reg(A)*x^(16L) + reg(B)*x^(8L) + reg(C).
constexpr size_t kLane = 4096;
const uint32_t kShiftOneLane = x_power(8 * kLane);
const uint32_t kShiftTwoLanes = x_power(16 * kLane);

void store64(unsigned char* p, uint64_t v) {
  std::memcpy(p, &v, 8);
}

// The register after `n` bytes at `p`; with kCopy, the bytes are also stored at `out` in the
// same pass (each is loaded once, for the checksum and the copy alike).
template <bool kCopy>
__attribute__((target("sse4.2"))) uint32_t hardware_register(uint32_t r, const unsigned char* p,
                                                             size_t n, unsigned char* out) {
  while (n >= 3 * kLane) {
    uint64_t a = r, b = 0, c = 0;
    for (size_t i = 0; i < kLane; i += 8) {
      const uint64_t x = load64(p + i), y = load64(p + kLane + i), z = load64(p + 2 * kLane + i);
      a = __builtin_ia32_crc32di(a, x);
      b = __builtin_ia32_crc32di(b, y);
      c = __builtin_ia32_crc32di(c, z);
      if (kCopy) {
        store64(out + i, x);
        store64(out + kLane + i, y);
        store64(out + 2 * kLane + i, z);
      }
    }
    r = multiply(static_cast<uint32_t>(a), kShiftTwoLanes) ^
        multiply(static_cast<uint32_t>(b), kShiftOneLane) ^ static_cast<uint32_t>(c);
    p += 3 * kLane;
    n -= 3 * kLane;
    if (kCopy) out += 3 * kLane;
  }
  uint64_t x = r;
  for (; n >= 8; n -= 8, p += 8) {
    const uint64_t v = load64(p);
    x = __builtin_ia32_crc32di(x, v);
    if (kCopy) {
      store64(out, v);
      out += 8;
    }
  }
  r = static_cast<uint32_t>(x);
  for (; n > 0; --n, ++p) {
    r = __builtin_ia32_crc32qi(r, *p);
    if (kCopy) *out++ = *p;
  }
  return r;
}

const bool kCrc32Instruction = __builtin_cpu_supports("sse4.2");
#else
const bool kCrc32Instruction = false;

template <bool kCopy>
uint32_t hardware_register(uint32_t, const unsigned char*, size_t, unsigned char*) {
  throw std::logic_error("crc32c: no CRC32 instruction on this CPU");
}
#endif

Crc32cKernel best_kernel() {
  if (crc32c_fold::supported()) return Crc32cKernel::kCarrylessFold;
  if (crc32c_fold::supported256()) return Crc32cKernel::kCarrylessFold256;
  return kCrc32Instruction ? Crc32cKernel::kCrc32Instruction : Crc32cKernel::kTables;
}
const Crc32cKernel kBest = best_kernel();

// The register after `n` bytes by `kernel`, copied to `out` too when it is not null.
uint32_t kernel_register(Crc32cKernel kernel, uint32_t r, const unsigned char* p, size_t n,
                         unsigned char* out) {
  const bool folds =
      kernel == Crc32cKernel::kCarrylessFold || kernel == Crc32cKernel::kCarrylessFold256;
  if (folds && n >= crc32c_fold::kMinBytes) {
    size_t done = 0;
    r = kernel == Crc32cKernel::kCarrylessFold ? crc32c_fold::fold_register(r, p, n, out, &done)
                                               : crc32c_fold::fold256_register(r, p, n, out, &done);
    p += done;
    n -= done;
    if (out) out += done;
  }
  if (kernel == Crc32cKernel::kTables) {
    if (out && n > 0) std::memcpy(out, p, n);
    return portable_register(r, p, n);
  }
  return out ? hardware_register<true>(r, p, n, out) : hardware_register<false>(r, p, n, nullptr);
}

}  // namespace

uint32_t crc32c_fold::x_power(uint64_t bits) {
  return dtrain::x_power(bits);
}

Crc32cKernel crc32c_kernel() {
  return kBest;
}

void require_crc32c_kernel(Crc32cKernel kernel) {
  if (static_cast<int>(kernel) > static_cast<int>(kBest))
    throw std::invalid_argument(std::string("crc32c: this CPU has no ") + to_string(kernel) +
                                " kernel (its best is " + to_string(kBest) + ")");
}

std::vector<Crc32cKernel> crc32c_kernels() {
  std::vector<Crc32cKernel> all;
  for (const auto k : {Crc32cKernel::kTables, Crc32cKernel::kCrc32Instruction,
                       Crc32cKernel::kCarrylessFold256, Crc32cKernel::kCarrylessFold})
    if (static_cast<int>(k) <= static_cast<int>(kBest)) all.push_back(k);
  return all;
}

const char* to_string(Crc32cKernel kernel) {
  switch (kernel) {
    case Crc32cKernel::kTables:
      return "tables";
    case Crc32cKernel::kCrc32Instruction:
      return "crc32-instruction";
    case Crc32cKernel::kCarrylessFold256:
      return "carryless-fold-256";
    case Crc32cKernel::kCarrylessFold:
      return "carryless-fold";
  }
  return "?";
}

uint32_t crc32c(const void* data, size_t size, uint32_t crc) {
  return ~kernel_register(kBest, ~crc, static_cast<const unsigned char*>(data), size, nullptr);
}

uint32_t crc32c_copy(void* out, const void* data, size_t size, uint32_t crc) {
  return ~kernel_register(kBest, ~crc, static_cast<const unsigned char*>(data), size,
                          static_cast<unsigned char*>(out));
}

uint32_t crc32c_with(Crc32cKernel kernel, const void* data, size_t size, uint32_t crc) {
  require_crc32c_kernel(kernel);
  return ~kernel_register(kernel, ~crc, static_cast<const unsigned char*>(data), size, nullptr);
}

uint32_t crc32c_copy_with(Crc32cKernel kernel, void* out, const void* data, size_t size,
                          uint32_t crc) {
  require_crc32c_kernel(kernel);
  return ~kernel_register(kernel, ~crc, static_cast<const unsigned char*>(data), size,
                          static_cast<unsigned char*>(out));
}

// crc(A B) = crc(A) * x^(8|B|) + crc(B): the pre- and post-inversions cancel.
uint32_t crc32c_combine(uint32_t crc_a, uint32_t crc_b, size_t size_b) {
  return multiply(crc_a, x_power(8 * static_cast<uint64_t>(size_b))) ^ crc_b;
}

}  // namespace dtrain
